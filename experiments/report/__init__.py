"""Reports over finished runs: mean ± sample std over seeds and paired Δ (`seed_stats`), per-class
tables and plots of a study (`run_tables`), sweeps across studies (`sweep_table`) and the per-class
diagnosis of one run (`diagnosis`, `diagnosis_report`)."""
