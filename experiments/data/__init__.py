"""Data: sources (image folders, arrays, TFDS / ArrayRecord files), the long-tailed subset and the
validation hold-out, augmentation, batches and the input pipelines (NumPy threads or grain).

Like MaxText's `input_pipeline/` and big_vision's `pp/`, the data code sits below the models and the
trainer and knows nothing of either; unlike big_vision's string-built preprocessing, augmentations
are Python functions in a registry keyed by `config.augmentation`, so a step's input is a plain
function of (seed, step).

The modules, each importing only those above it:
  split              the `Split` type (uint8 images, labels, class names) every source returns
  pillow_ops         Pillow's image operations in NumPy, bit for bit (AutoAugment's, ColorJitter's)
  crop_flip          pad + random crop + flip (CIFAR), random horizontal flip
  autoaugment        AutoAugment's CIFAR-10 policy and Cutout
  resized_crop       RandomResizedCrop with Pillow's bilinear resize
  color_jitter       ColorJitter (HSV hue shift) and RandomGrayscale
  augmentations      the augmentations by name (`augment_view`), the released recipe's views
  device_crop_flip   crop + flip cut on the device from the split in device memory (jnp)
  lazy_images        `LazyImages`: rows decoded when indexed, over a picklable record reader
  image_files        OLTR split lists and iNaturalist 2018 JSON over image folders
  tfds_source        'tfds:<name>' data sources prepared in ArrayRecord format
  array_records      this project's ArrayRecord files ('arrayrecord:<path>') and their writer
  sources            the lazy sources by name; `python -m experiments.data.sources` converts
  in_memory_sources  digits, MNIST, CIFAR-10 JPEG held in host memory
  normalization      channel (mean, std) per data set and `normalize` (host or device)
  long_tail          long-tailed class sizes and subsets; Many / Medium / Few groups
  holdout            the stratified validation hold-out
  loading            `load_split` (any source by name) and `load_data` (a config's splits)
  batches            training / evaluation batches, pure functions of (seed, epoch, batch)
  threaded_map       `map` in a pool of threads, in order, a bounded number of calls ahead
  input_pipeline     the training input of a run: 'numpy' (threads) or 'grain' (processes)
"""
