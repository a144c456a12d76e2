"""experiments/data's augmentations (pillow_ops.py, crop_flip.py, autoaugment.py, resized_crop.py,
color_jitter.py, augmentations.py) against Pillow and the reference's transforms.

The reference (`autoaug.py` of the reweighting paper's release = DeepVoltaire's CIFAR10Policy, and
torchvision's PIL transforms) runs Pillow on one image at a time; `PIL_OPS` below is its code with
the random sign passed in. Every NumPy op is compared with Pillow for exact equality, the
interpolating ones (bicubic shear, bilinear resize) and the HSV conversions included: the modules
reproduce Pillow's own integer, fixed-point and float32/float64 arithmetic, so no tolerance is
needed, and a tolerance would hide an off-by-one in a filter's edge handling.
"""

import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

from experiments.data import augmentations
from experiments.data import autoaugment
from experiments.data import color_jitter
from experiments.data import crop_flip
from experiments.data import pillow_ops
from experiments.data import resized_crop
from experiments.data.crop_flip import random_crop_flip

GREY = (128, 128, 128)


def rotate_with_fill(img, degrees):
  rotated = img.convert("RGBA").rotate(degrees)
  return Image.composite(rotated, Image.new("RGBA", rotated.size, (128,) * 4),
                         rotated).convert(img.mode)


# The reference's SubPolicy functions; `v` is the already signed magnitude (op_parameter).
PIL_OPS = {
    "shearX": lambda img, v: img.transform(img.size, Image.AFFINE, (1, v, 0, 0, 1, 0),
                                           Image.BICUBIC, fillcolor=GREY),
    "shearY": lambda img, v: img.transform(img.size, Image.AFFINE, (1, 0, 0, v, 1, 0),
                                           Image.BICUBIC, fillcolor=GREY),
    "translateX": lambda img, v: img.transform(img.size, Image.AFFINE, (1, 0, v, 0, 1, 0),
                                               fillcolor=GREY),
    "translateY": lambda img, v: img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, v),
                                               fillcolor=GREY),
    "rotate": rotate_with_fill,
    "color": lambda img, v: ImageEnhance.Color(img).enhance(v),
    "posterize": lambda img, v: ImageOps.posterize(img, int(v)),
    "solarize": lambda img, v: ImageOps.solarize(img, v),
    "contrast": lambda img, v: ImageEnhance.Contrast(img).enhance(v),
    "sharpness": lambda img, v: ImageEnhance.Sharpness(img).enhance(v),
    "brightness": lambda img, v: ImageEnhance.Brightness(img).enhance(v),
    "autocontrast": lambda img, v: ImageOps.autocontrast(img),
    "equalize": lambda img, v: ImageOps.equalize(img),
    "invert": lambda img, v: ImageOps.invert(img),
}
GEOMETRIC = ("shearX", "shearY", "translateX", "translateY", "rotate")


def pil(op, image, value):
  return np.asarray(PIL_OPS[op](Image.fromarray(image), value))


def sample_images(seed, num=24, size=(32, 32)):
  """Uniform noise, narrow-range images (autocontrast stretches them), piecewise-flat blurred
  blocks (interpolation on edges) and images of few distinct values (equalize's corner cases)."""
  rng = np.random.default_rng(seed)
  quarter = num // 4
  uniform = rng.integers(0, 256, (quarter, *size, 3))
  narrow = rng.integers(0, 200, (quarter, 1, 1, 3)) + rng.integers(0, 50, (quarter, *size, 3))
  blocks = np.repeat(np.repeat(rng.integers(0, 256, (quarter, 4, 4, 3)), size[0] // 4, 1),
                     size[1] // 4, 2)
  blocks = np.clip(blocks + rng.normal(0, 10, blocks.shape), 0, 255)
  few = rng.integers(0, 3, (num - 3 * quarter, *size, 3)) * rng.integers(0, 120, (1, 1, 1, 3))
  return np.concatenate([uniform, narrow, blocks, few]).astype(np.uint8)


def assert_ops_match_pillow(op, images, values):
  ours = autoaugment.apply_op(op, images, values)
  assert ours.dtype == np.uint8 and ours.shape == images.shape
  for i, (image, value) in enumerate(zip(images, values)):
    np.testing.assert_array_equal(ours[i], pil(op, image, value),
                                  err_msg=f"{op} image {i} parameter {value}")


@pytest.mark.parametrize("op", autoaugment.OP_NAMES)
def test_every_op_equals_pillow_at_every_level_and_sign(op):
  """Each of the 14 ops on a batch with one (level, sign) per image — all 10 levels × both signs
  over 4 kinds of image — equals the reference's Pillow call on each image, bit for bit."""
  images = sample_images(seed=len(op), num=40)
  levels = np.arange(40) % 10
  signs = np.where(np.arange(40) % 20 < 10, -1.0, 1.0)
  values = autoaugment.op_parameter(op, levels, signs)
  assert_ops_match_pillow(op, images, values)


@pytest.mark.parametrize("op,low,high", [("shearX", -1.5, 1.5), ("shearY", -1.5, 1.5),
                                         ("translateX", -40, 40), ("translateY", -40, 40),
                                         ("rotate", -400, 400), ("color", -1, 3),
                                         ("contrast", -1, 3), ("brightness", 0, 3),
                                         ("sharpness", -1, 3), ("solarize", -5, 260),
                                         ("posterize", 1, 9)])
def test_ops_equal_pillow_off_the_policy_grid_and_on_non_square_images(op, low, high):
  """Parameters drawn off the 10 levels (fractional translations, any angle, extrapolating
  factors) and a 24×40 image size also match Pillow exactly; so do the rotations by exactly
  90°, 180°, 270° (Pillow's transpose paths)."""
  rng = np.random.default_rng(7)
  for size in ((32, 32), (24, 40)):
    images = sample_images(seed=3, num=16, size=size)
    values = rng.uniform(low, high, len(images))
    if op == "rotate":
      values[:4] = (90.0, 180.0, 270.0, -90.0)
    assert_ops_match_pillow(op, images, values)


def test_equalize_clips_a_table_entry_above_255_like_pillow():
  """A channel where Pillow's equalize table exceeds 255 (600 × 0, 300 × 128, 124 × 200: step 3,
  table value (1 + 900) // 3 = 300 at 200) comes out 255 there, as Pillow's `point` clips."""
  channel = np.repeat(np.array([0, 128, 200], np.uint8), [600, 300, 124]).reshape(32, 32)
  image = np.stack([channel, channel.T, np.full((32, 32), 7, np.uint8)], axis=-1)
  ours = pillow_ops.equalize(image[None])[0]
  np.testing.assert_array_equal(ours, pil("equalize", image, None))
  assert ours[..., 0].max() == 255


def test_op_parameters_follow_the_spec_formulas():
  """PIPELINES §1: shear 0.3m/9, translate (150/331)·32·m/9 px, rotate 30m/9 (positive whatever
  the sign), factor 1 ± 0.1m, posterize round(8 − 4m/9) bits, solarize 256(1 − m/9)."""
  m = np.arange(10)
  for sign in (-1.0, 1.0):
    np.testing.assert_allclose(autoaugment.op_parameter("shearX", m, sign), sign * 0.3 * m / 9)
    np.testing.assert_allclose(autoaugment.op_parameter("translateY", m, sign),
                               sign * 150 / 331 * 32 * m / 9)
    np.testing.assert_allclose(autoaugment.op_parameter("rotate", m, sign), 30 * m / 9)
    for op in ("color", "contrast", "brightness", "sharpness"):
      np.testing.assert_allclose(autoaugment.op_parameter(op, m, sign), 1 + sign * 0.1 * m)
    np.testing.assert_array_equal(autoaugment.op_parameter("posterize", m, sign),
                                  np.round(8 - 4 * m / 9))
    np.testing.assert_allclose(autoaugment.op_parameter("solarize", m, sign), 256 * (1 - m / 9))


def test_cifar10_policy_table_has_25_valid_sub_policies():
  """25 sub-policies of two (op, probability, level) triples; ops among the 14, probabilities in
  [0, 1], integer levels 0..9; first and last as in the AutoAugment paper's CIFAR-10 policy."""
  assert len(autoaugment.CIFAR10_POLICY) == 25
  assert len(autoaugment.OP_NAMES) == 14
  for sub_policy in autoaugment.CIFAR10_POLICY:
    assert len(sub_policy) == 2
    for op, probability, level in sub_policy:
      assert op in autoaugment.OP_NAMES
      assert 0.0 <= probability <= 1.0
      assert isinstance(level, int) and 0 <= level <= 9
  assert autoaugment.CIFAR10_POLICY[0] == (("invert", 0.1, 7), ("contrast", 0.2, 6))
  assert autoaugment.CIFAR10_POLICY[-1] == (("translateY", 0.7, 9), ("autocontrast", 0.9, 1))
  used = {op for sub_policy in autoaugment.CIFAR10_POLICY for op, _, _ in sub_policy}
  assert used == set(autoaugment.OP_NAMES) - {"shearX"}  # ShearX is in no CIFAR-10 sub-policy


def reference_autoaugment(images, seed, policy):
  """The reference's SubPolicy on each image with Pillow, from the draws autoaugment documents
  (sub-policy index, then uniforms (B, 2), then sign uniforms (B, 2))."""
  rng = np.random.default_rng(seed)
  chosen = rng.integers(len(policy), size=len(images))
  uniforms = rng.random((len(images), 2))
  signs = np.where(rng.random((len(images), 2)) < 0.5, -1.0, 1.0)
  out = []
  for i, image in enumerate(images):
    img = Image.fromarray(image)
    for slot, (op, probability, level) in enumerate(policy[chosen[i]]):
      if uniforms[i, slot] < probability:
        img = PIL_OPS[op](img, float(autoaugment.op_parameter(op, level, signs[i, slot])))
    out.append(np.asarray(img))
  return np.stack(out), chosen


def test_autoaugment_is_deterministic_and_equals_the_reference_sub_policies():
  """Same generator state → same batch; the input is not modified; and every image is the
  reference's CIFAR10Policy (Pillow) under the same draws."""
  images = sample_images(seed=11, num=96)
  before = images.copy()
  first = autoaugment.autoaugment(images, np.random.default_rng(5))
  np.testing.assert_array_equal(first, autoaugment.autoaugment(images, np.random.default_rng(5)))
  np.testing.assert_array_equal(images, before)
  assert not np.array_equal(first, autoaugment.autoaugment(images, np.random.default_rng(6)))
  expected, _ = reference_autoaugment(images, 5, autoaugment.CIFAR10_POLICY)
  np.testing.assert_array_equal(first, expected)


def test_autoaugment_with_certain_probabilities_applies_both_ops_of_the_drawn_sub_policy():
  """With every probability 1, each image is op2(op1(image)) of its drawn sub-policy, applied by
  hand with Pillow; every sub-policy is drawn in a batch of 200."""
  certain = tuple(tuple((op, 1.0, level) for op, _, level in sub_policy)
                  for sub_policy in autoaugment.CIFAR10_POLICY)
  images = sample_images(seed=12, num=200)
  ours = autoaugment.autoaugment(images, np.random.default_rng(9), policy=certain)
  expected, chosen = reference_autoaugment(images, 9, certain)
  np.testing.assert_array_equal(ours, expected)
  assert set(chosen) == set(range(25))


def test_cutout_zeroes_one_clipped_16x16_square_per_image():
  """On an all-255 batch: per image the zeros form one rectangle, rows [cy − 8, cy + 8) and
  columns [cx − 8, cx + 8) clipped to the image, in all three channels, with (cy, cx) the
  documented draws; 256 zero pixels exactly when 8 ≤ cy, cx ≤ 24, fewer at the borders; every
  other pixel stays 255. On random images only the hole changes."""
  images = np.full((500, 32, 32, 3), 255, np.uint8)
  out = autoaugment.cutout(images, np.random.default_rng(3))
  rng = np.random.default_rng(3)
  centre_y, centre_x = rng.integers(32, size=500), rng.integers(32, size=500)
  zero = out == 0
  assert (zero.all(-1) == zero.any(-1)).all()  # channels together
  zero = zero[..., 0]
  assert set(np.unique(out)) == {0, 255}
  for i in range(500):
    rows = (np.arange(32) >= centre_y[i] - 8) & (np.arange(32) < centre_y[i] + 8)
    cols = (np.arange(32) >= centre_x[i] - 8) & (np.arange(32) < centre_x[i] + 8)
    np.testing.assert_array_equal(zero[i], rows[:, None] & cols[None, :])
  counts = zero.sum(axis=(1, 2))
  interior = (centre_y >= 8) & (centre_y <= 24) & (centre_x >= 8) & (centre_x <= 24)
  assert (counts[interior] == 256).all() and (counts[~interior] < 256).all()
  assert interior.any() and (~interior).any() and counts.min() >= 64
  noise = sample_images(seed=4, num=40)
  holes = autoaugment.cutout(noise, np.random.default_rng(8))
  hole_mask = autoaugment.cutout(np.full_like(noise, 255), np.random.default_rng(8)) == 0
  np.testing.assert_array_equal(holes[~hole_mask], noise[~hole_mask])
  assert (holes[hole_mask] == 0).all()


def test_resized_crop_equals_pillow_crop_then_bilinear_resize():
  """torchvision's resized_crop on PIL images, `img.crop(box).resize((32, 32), BILINEAR)`, for
  random boxes (1..32 px a side), and a plain downscale to 12 × 20 (antialiased filter): exact."""
  rng = np.random.default_rng(2)
  images = rng.integers(0, 256, (120, 32, 32, 3), dtype=np.uint8)
  height, width = rng.integers(1, 33, 120), rng.integers(1, 33, 120)
  top, left = rng.integers(0, 33 - height), rng.integers(0, 33 - width)
  ours = resized_crop.resized_crop(images, top, left, height, width)
  for i in range(120):
    box = (left[i], top[i], left[i] + width[i], top[i] + height[i])
    expected = Image.fromarray(images[i]).crop(box).resize((32, 32), Image.BILINEAR)
    np.testing.assert_array_equal(ours[i], np.asarray(expected), err_msg=f"box {box}")
  small = resized_crop.resized_crop(images[:20], 0, 0, 32, 32, size=(12, 20))
  for i in range(20):
    expected = Image.fromarray(images[i]).resize((20, 12), Image.BILINEAR)
    np.testing.assert_array_equal(small[i], np.asarray(expected))


def test_random_resized_crop_shape_identity_and_fallback():
  """uint8 [B, 32, 32, 3] out; scale = ratio = (1, 1) crops the whole image, and resizing 32 → 32
  is the identity; areas that can never fit (scale (2, 3)) fall back to the centred crop, for a
  square image the whole image; crops differ between images."""
  images = sample_images(seed=5, num=16)
  out = resized_crop.random_resized_crop(images, np.random.default_rng(0))
  assert out.dtype == np.uint8 and out.shape == images.shape
  assert not np.array_equal(out, images)
  whole = resized_crop.random_resized_crop(images, np.random.default_rng(0), scale=(1.0, 1.0),
                                           ratio=(1.0, 1.0))
  np.testing.assert_array_equal(whole, images)
  fallback = resized_crop.random_resized_crop(images, np.random.default_rng(0), scale=(2.0, 3.0))
  np.testing.assert_array_equal(fallback, images)


def test_grayscale_equals_pillow_convert_l_in_three_channels():
  """ITU-R 601-2 luma as Pillow's convert('L'), replicated to 3 channels; random_grayscale with
  p = 1 greys every image, with p = 0 none."""
  images = sample_images(seed=6, num=40)
  grey = color_jitter.grayscale(images)
  for i in range(len(images)):
    luma = np.asarray(Image.fromarray(images[i]).convert("L"))
    np.testing.assert_array_equal(grey[i], np.repeat(luma[..., None], 3, axis=-1))
  np.testing.assert_array_equal(
      color_jitter.random_grayscale(images, np.random.default_rng(0), p=1.0), grey)
  np.testing.assert_array_equal(
      color_jitter.random_grayscale(images, np.random.default_rng(0), p=0.0), images)


def torchvision_adjust_hue(img, hue_factor):
  """torchvision.transforms.functional_pil.adjust_hue."""
  h, s, v = img.convert("HSV").split()
  np_h = np.array(h, dtype=np.uint8)
  np_h += np.int64(hue_factor * 255).astype(np.uint8)
  return Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB")


def test_hsv_conversions_and_hue_adjustment_equal_pillow():
  """rgb_to_hsv / hsv_to_rgb equal Pillow's convert('HSV') / HSV → RGB on all 2^24 triples (in 8
  blocks), and adjust_hue equals torchvision's PIL adjust_hue for random factors in [−0.5, 0.5]
  (including 0 and ±0.5)."""
  for first in range(0, 256, 32):
    grid = np.meshgrid(np.arange(first, first + 32), np.arange(256), np.arange(256), indexing="ij")
    triples = np.stack(grid, axis=-1).astype(np.uint8).reshape(32 * 256, 256, 3)
    np.testing.assert_array_equal(color_jitter.rgb_to_hsv(triples[None])[0],
                                  np.asarray(Image.fromarray(triples).convert("HSV")))
    np.testing.assert_array_equal(color_jitter.hsv_to_rgb(triples[None])[0],
                                  np.asarray(Image.fromarray(triples, "HSV").convert("RGB")))
  images = sample_images(seed=8, num=40)
  factors = np.random.default_rng(1).uniform(-0.5, 0.5, len(images))
  factors[:3] = (0.0, -0.5, 0.5)
  ours = color_jitter.adjust_hue(images, factors)
  for i in range(len(images)):
    expected = torchvision_adjust_hue(Image.fromarray(images[i]), factors[i])
    np.testing.assert_array_equal(ours[i], np.asarray(expected))


def test_color_jitter_with_zero_strengths_or_p_zero_is_the_identity():
  images = sample_images(seed=9, num=24)
  rng = np.random.default_rng(0)
  np.testing.assert_array_equal(
      color_jitter.color_jitter(images, rng, brightness=0, contrast=0, saturation=0, hue=0, p=1.0),
      images)
  np.testing.assert_array_equal(color_jitter.color_jitter(images, rng, p=0.0), images)


def test_color_jitter_equals_torchvision_order_of_pillow_adjustments():
  """p = 1: each image is torchvision's ColorJitter(0.4, 0.4, 0.4, 0.1) on PIL — brightness,
  contrast, saturation (ImageEnhance) and hue in the drawn permutation with the drawn factors
  (draws in the documented order)."""
  images = sample_images(seed=10, num=48)
  ours = color_jitter.color_jitter(images, np.random.default_rng(4), p=1.0)
  rng = np.random.default_rng(4)
  rng.random(len(images))  # the p draws
  order = np.argsort(rng.random((len(images), 4)), axis=1)
  factors = [rng.uniform(0.6, 1.4, len(images)) for _ in range(3)]
  factors.append(rng.uniform(-0.1, 0.1, len(images)))
  adjust = (lambda img, f: ImageEnhance.Brightness(img).enhance(f),
            lambda img, f: ImageEnhance.Contrast(img).enhance(f),
            lambda img, f: ImageEnhance.Color(img).enhance(f),
            torchvision_adjust_hue)
  for i in range(len(images)):
    img = Image.fromarray(images[i])
    for k in order[i]:
      img = adjust[k](img, factors[k][i])
    np.testing.assert_array_equal(ours[i], np.asarray(img), err_msg=f"image {i}")


def test_views_run_on_a_batch_of_256_and_are_deterministic():
  """reference_view0 and simclr_view on 256 CIFAR-sized images: uint8 [256, 32, 32, 3], a pure
  function of the generator state; view 0 is crop + flip → autoaugment → cutout in that order."""
  images = np.random.default_rng(0).integers(0, 256, (256, 32, 32, 3), dtype=np.uint8)
  for view in (augmentations.reference_view0, augmentations.simclr_view):
    out = view(images, np.random.default_rng(1))
    assert out.dtype == np.uint8 and out.shape == images.shape
    np.testing.assert_array_equal(out, view(images, np.random.default_rng(1)))
  rng = np.random.default_rng(1)
  by_hand = autoaugment.cutout(autoaugment.autoaugment(random_crop_flip(images, rng), rng), rng)
  np.testing.assert_array_equal(augmentations.reference_view0(images, np.random.default_rng(1)),
                                by_hand)


@pytest.mark.parametrize("bad", [np.zeros((4, 32, 32, 3), np.float32),
                                 np.zeros((32, 32, 3), np.uint8),
                                 np.zeros((4, 32, 32, 1), np.uint8)])
def test_images_that_are_not_uint8_rgb_batches_are_refused(bad):
  with pytest.raises(ValueError, match="images: expected uint8"):
    autoaugment.autoaugment(bad, np.random.default_rng(0))


def test_process_rows_are_the_processes_positions_in_the_global_batch():
  np.testing.assert_array_equal(crop_flip.process_rows(np.arange(6), 1, 3), [1, 4])
  np.testing.assert_array_equal(crop_flip.process_rows(np.arange(6), 0, 1), np.arange(6))


@pytest.mark.parametrize("augment", [
    lambda x, rng, i, p: crop_flip.random_crop_flip(x, rng, process_index=i, process_count=p),
    lambda x, rng, i, p: crop_flip.random_flip(x, rng, process_index=i, process_count=p),
    lambda x, rng, i, p: resized_crop.random_resized_crop(x, rng, process_index=i,
                                                          process_count=p)],
    ids=["random_crop_flip", "random_flip", "random_resized_crop"])
@pytest.mark.parametrize("processes", [2, 3])
def test_each_process_gets_its_rows_of_the_one_process_augmentation(augment, processes):
  """P processes, each augmenting its rows (positions i, i + P, ... of the global batch) with the
  same generator state, together give the one-process augmentation of the global batch."""
  images = np.random.default_rng(1).integers(0, 256, (6, 16, 12, 3), np.uint8)
  whole = augment(images, np.random.default_rng(3), 0, 1)
  for i in range(processes):
    rows = crop_flip.process_rows(images, i, processes)
    np.testing.assert_array_equal(augment(rows, np.random.default_rng(3), i, processes),
                                  whole[i::processes])
