import random

import pytest
from tokenizers import normalizers

from serve.engine.charsmap import precompiled_charsmap

pytestmark = pytest.mark.unit


def normalise(table: dict[str, str], text: str) -> str:
    return normalizers.Precompiled(precompiled_charsmap(table)).normalize_str(text)


def test_tokenizers_reads_the_built_charsmap_as_the_table_says():
    table = {"Ａ": "A", "\x01": "", "ﬁ": "fi", "\t": " ", "①": "1", "é": "E", "😀": "<smile>"}
    assert normalise(table, "x\x01Ａ ﬁne\t①é ok ü😀") == "xA fine 1E ok ü<smile>"


def test_every_entry_of_a_large_table_round_trips():
    """Thousands of keys of 1 to 4 UTF-8 bytes, as in a real normalisation table: each
    character is replaced by its own entry, characters outside the table are kept."""
    rng = random.Random(17)
    print("seed 17")
    candidates = [c for c in range(0x21, 0x2FFFF) if c != 0x41 and not 0xD800 <= c < 0xE000]
    keys = rng.sample(candidates, 5000)
    table = {chr(k): "".join(chr(rng.randrange(0x61, 0x7B)) for _ in range(rng.randrange(3)))
             for k in keys}  # fmt: skip
    charsmap = normalizers.Precompiled(precompiled_charsmap(table))
    # One character per call: tokenizers replaces a whole grapheme by its first character's
    # replacement (the quirk in serve/engine/charsmap.py), so joined keys could form other
    # graphemes.
    assert [charsmap.normalize_str(key) for key in table] == list(table.values())
    outside = [chr(c) for c in rng.sample(candidates, 500) if chr(c) not in table]
    assert [charsmap.normalize_str(c) for c in outside] == outside


def test_characters_beside_the_keys_are_kept_and_never_read_past_the_trie():
    """'°' (C2 B0) walks to the node of C2, which '²' (C2 B2) created, then looks at a unit
    for B0 that no key made: the trie must hold it (a 9,854-unit e5 trie panicked here)."""
    table = {"²": "2", "é": "E", "ﬁ": "fi"}
    charsmap = normalizers.Precompiled(precompiled_charsmap(table))
    characters = [chr(c) for c in range(0x20, 0x3000) if not 0xD800 <= c < 0xE000]
    assert [charsmap.normalize_str(c) for c in characters] == [table.get(c, c) for c in characters]


def test_empty_or_nul_keys_are_refused():
    with pytest.raises(ValueError, match="non-empty and NUL-free"):
        precompiled_charsmap({"": "x"})
