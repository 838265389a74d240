"""The image transforms of vision_extra against references computed another way (loops,
np.rot90, colorsys, Pillow)."""
import colorsys

import numpy as np
import pytest

from mstrain.dataset import vision

RNG = np.random.default_rng(0)
IMAGE = RNG.integers(0, 256, (5, 6, 3), dtype=np.uint8)


def _pad_reference(image, top, bottom, left, right, mode):
    height, width = image.shape[:2]

    def source(i, n):
        if mode == "edge":
            return min(max(i, 0), n - 1)
        period = 2 * n - 2 if mode == "reflect" else 2 * n
        i %= period
        if mode == "reflect":
            return i if i < n else period - i
        return i if i < n else period - 1 - i

    out = np.zeros((height + top + bottom, width + left + right) + image.shape[2:], image.dtype)
    for y in range(out.shape[0]):
        for x in range(out.shape[1]):
            out[y, x] = image[source(y - top, height), source(x - left, width)]
    return out


@pytest.mark.parametrize("mode", [vision.Border.EDGE, vision.Border.REFLECT, vision.Border.SYMMETRIC])
def test_pad_modes_against_index_arithmetic(mode):
    out = vision.Pad((1, 2, 3, 4), padding_mode=mode)(IMAGE)  # left 1, top 2, right 3, bottom 4
    np.testing.assert_array_equal(out, _pad_reference(IMAGE, 2, 4, 1, 3, mode))


def test_pad_constant_and_center_crop():
    out = vision.Pad(2, fill_value=9)(IMAGE)
    assert out.shape == (9, 10, 3) and (out[:2] == 9).all() and (out[:, -2:] == 9).all()
    np.testing.assert_array_equal(out[2:-2, 2:-2], IMAGE)
    np.testing.assert_array_equal(vision.CenterCrop((3, 2))(IMAGE), IMAGE[1:4, 2:4])
    grown = vision.CenterCrop(8)(IMAGE)  # padded with zeros: 3 rows (1 above, 2 below), 2 columns
    assert grown.shape == (8, 8, 3)
    np.testing.assert_array_equal(grown[1:6, 1:7], IMAGE)
    assert grown.sum() == IMAGE.astype(np.int64).sum()


def test_to_tensor_is_chw_over_255():
    out = vision.ToTensor()(IMAGE)
    assert out.dtype == np.float32 and out.shape == (3, 5, 6)
    np.testing.assert_allclose(out[1, 2, 3], IMAGE[2, 3, 1] / 255.0, rtol=1e-6)


def test_rotation_by_90_is_rot90_and_keeps_the_size():
    square = RNG.integers(0, 256, (5, 5), dtype=np.uint8)
    np.testing.assert_array_equal(vision.RandomRotation((90, 90))(square), np.rot90(square))
    np.testing.assert_array_equal(vision.RandomRotation((-90, -90))(square), np.rot90(square, -1))
    tall = RNG.integers(1, 256, (3, 5), dtype=np.uint8)
    expanded = vision.RandomRotation((90, 90), expand=True)(tall)
    np.testing.assert_array_equal(expanded, np.rot90(tall))
    cropped = vision.RandomRotation((90, 90), fill_value=0)(tall)
    assert cropped.shape == (3, 5) and (cropped[:, 0] == 0).all()  # outside the turned image


def test_random_resized_crop_of_the_whole_image_is_a_resize():
    square = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    whole = vision.RandomResizedCrop(4, scale=(1.0, 1.0), ratio=(1.0, 1.0))(square)
    np.testing.assert_array_equal(whole, vision.Resize((4, 4))(square))
    crops = [vision.RandomResizedCrop((3, 5), scale=(0.2, 0.5))(square) for _ in range(20)]
    assert all(c.shape == (3, 5, 3) for c in crops)
    assert len({c.tobytes() for c in crops}) > 1  # the window is random


def test_color_adjust_brightness_and_saturation():
    doubled = vision.RandomColorAdjust(brightness=(2, 2))(IMAGE)
    np.testing.assert_array_equal(doubled, np.clip(IMAGE.astype(int) * 2, 0, 255))
    grey = vision.RandomColorAdjust(saturation=(0, 0))(IMAGE)
    expected = np.rint(IMAGE.astype(float) @ np.array([0.299, 0.587, 0.114]))
    np.testing.assert_array_equal(grey, np.repeat(expected[..., None], 3, axis=2))
    same = vision.RandomColorAdjust()(IMAGE)
    np.testing.assert_array_equal(same, IMAGE)


def test_color_adjust_hue_against_colorsys():
    pixels = RNG.random((4, 4, 3))
    out = vision.RandomColorAdjust(hue=(0.25, 0.25))(pixels)
    for y in range(4):
        for x in range(4):
            h, s, v = colorsys.rgb_to_hsv(*pixels[y, x])
            np.testing.assert_allclose(out[y, x], colorsys.hsv_to_rgb((h + 0.25) % 1.0, s, v), atol=1e-9)


def test_bad_arguments_name_the_transform():
    with pytest.raises(ValueError, match="RandomColorAdjust: hue"):
        vision.RandomColorAdjust(hue=(0.2, 0.7))
    with pytest.raises(ValueError, match="Pad: padding_mode"):
        vision.Pad(1, padding_mode="wrap")
    with pytest.raises(ValueError, match="Decode"):
        pytest.importorskip("PIL", reason="Pillow is optional (vision.Decode)")
        vision.Decode()(np.zeros(4, np.uint8))


def test_decode_png_and_mindspore_1x_module_names():
    image_module = pytest.importorskip("PIL.Image", reason="Pillow is optional (vision.Decode)")
    import io
    buffer = io.BytesIO()
    image_module.fromarray(IMAGE).save(buffer, format="PNG")
    np.testing.assert_array_equal(vision.Decode()(np.frombuffer(buffer.getvalue(), np.uint8)), IMAGE)
    import mstrain.dataset.vision.c_transforms as c_transforms
    from mstrain.dataset.transforms import py_transforms
    assert c_transforms.CenterCrop is vision.CenterCrop and py_transforms.OneHot is not None
