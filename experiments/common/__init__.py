"""What every layer of the harness may use: the error types it reports as one line, the range checks
of config fields, the config overrides (`field=value`), the command line (absl flags) that prints
those errors, and XLA's CPU flags. Imports nothing else of the harness."""
