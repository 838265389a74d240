"""Vision, generic and text transforms against numpy references."""
import numpy as np
import pytest

from mstrain import dataset as ds
from mstrain.dataset import text, transforms, vision


def test_normalize_rescale_hwc2chw_typecast():
    image = np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2)
    out = vision.Normalize([1.0, 2.0], [2.0, 4.0])(image)
    assert out.dtype == np.float32 and np.allclose(out, (image - np.array([1, 2])) / np.array([2, 4]))
    chw = vision.HWC2CHW()(image)
    assert chw.shape == (2, 2, 3) and np.array_equal(chw[1], image[:, :, 1])
    assert np.allclose(vision.Normalize([1.0, 2.0], [2.0, 4.0], is_hwc=False)(chw),
                       vision.HWC2CHW()(out))
    assert np.allclose(vision.Rescale(1 / 255, -0.5)(image), image / 255 - 0.5)
    assert transforms.TypeCast("int32")(image).dtype == np.int32
    assert transforms.OneHot(3)(np.array([2, 0])).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert transforms.Compose([vision.Rescale(2, 0), transforms.TypeCast("int64")])(image).dtype == np.int64


def test_random_crop_is_a_window_of_the_padded_image():
    image = np.arange(5 * 5).reshape(5, 5)
    padded = np.pad(image, 2)
    seen = set()
    for _ in range(30):
        crop = vision.RandomCrop(5, padding=2)(image)
        matches = [(y, x) for y in range(5) for x in range(5)
                   if np.array_equal(padded[y:y + 5, x:x + 5], crop)]
        assert matches
        seen.add(matches[0])
    assert len(seen) > 3
    with pytest.raises(ValueError, match="larger"):
        vision.RandomCrop(8)(image)


def test_flip_probability_extremes_and_resize():
    image = np.arange(12).reshape(3, 4)
    assert np.array_equal(vision.RandomHorizontalFlip(1.0)(image), image[:, ::-1])
    assert np.array_equal(vision.RandomHorizontalFlip(0.0)(image), image)
    big = np.arange(16, dtype=np.float32).reshape(4, 4)
    half = vision.Resize((2, 2))(big)
    assert np.allclose(half, [[big[0:2, 0:2].mean(), big[0:2, 2:4].mean()],
                              [big[2:4, 0:2].mean(), big[2:4, 2:4].mean()]])
    assert vision.Resize(8, interpolation="nearest")(np.zeros((4, 6, 3), np.uint8)).shape == (8, 12, 3)


def test_random_transforms_in_a_pipeline_do_not_depend_on_workers():
    images = np.random.default_rng(0).integers(0, 255, (24, 6, 6, 1), dtype=np.uint8)

    def run(workers):
        data = ds.NumpySlicesDataset({"image": images}, shuffle=False).map(
            [vision.RandomCrop(4, padding=1), vision.RandomHorizontalFlip()], "image",
            num_parallel_workers=workers)
        it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
        return [[r[0].tolist() for r in it] for _ in range(2)]

    one, three = run(1), run(3)
    assert one == three and one[0] != one[1]


def test_char_tokenizer_round_trip_and_vocab_file(tmp_path):
    corpus = "hello world\nhi"
    tok = text.CharTokenizer.from_corpus(corpus)
    assert tok.tokens == sorted(set(corpus)) and tok.vocab_size == len(set(corpus))
    ids = tok.encode("hold")
    assert ids.dtype == np.int32 and tok.decode(ids) == "hold"
    path = tmp_path / "vocab.json"
    tok.save(str(path))
    again = text.CharTokenizer.load(str(path))
    assert again.tokens == tok.tokens and again.decode(again.encode(corpus)) == corpus
    with pytest.raises(ValueError, match="'z' at position 2"):
        tok.encode("hiz")
    lenient = text.CharTokenizer.from_corpus(corpus, unknown_token="?")
    assert lenient.decode(lenient.encode("hiz")) == "hi?"
    with pytest.raises(Exception, match="byte"):
        text.ByteLevelTokenizer.load(str(path))


def test_byte_level_tokenizer_handles_any_text(tmp_path):
    tok = text.ByteLevelTokenizer(special_tokens=["<eos>"])
    ids = tok.encode("héllo")
    assert ids.tolist() == list("héllo".encode("utf-8")) and tok.vocab_size == 257
    assert tok.decode(np.append(ids, tok.token_id("<eos>"))) == "héllo<eos>"
    tok.save(str(tmp_path / "bytes.json"))
    assert text.ByteLevelTokenizer.load(str(tmp_path / "bytes.json")).special_tokens == ["<eos>"]


def test_sequence_windows_match_slicing_and_batch_fast_path():
    tokens = np.arange(50, dtype=np.int32)
    windows = text.SequenceWindows(tokens, block_size=8, stride=5)
    assert len(windows) == (50 - 8 - 1) // 5 + 1
    x, y = windows[3]
    assert x.tolist() == list(range(15, 23)) and y.tolist() == list(range(16, 24))
    data = ds.GeneratorDataset(windows, ["input", "target"], shuffle=True).batch(4)
    seen = []
    for x, y in data.create_tuple_iterator(output_numpy=True, num_epochs=1):
        assert np.array_equal(y[:, :-1], x[:, 1:]) and x.shape[1] == 8
        seen += (x[:, 0] // 5).tolist()
    assert sorted(seen) == list(range(len(windows)))
