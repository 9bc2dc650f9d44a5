"""MarkItDown (MIT) on the files of ``benchmarks.formats``' throughput part, for comparison with
Grounded's own loaders: time, characters, and how often a table's header row appears.

Conclusion (benchmarks/results/office-documents.md, "Libraries compared"): MarkItDown reads no
scan without an OCR plugin or a remote model, writes a spreadsheet's 5,000 rows under one
header (a chunk of rows after the first says nothing of their columns), and failed on the
generated Word file; Grounded keeps its own loaders.

    .venv/bin/pip install --target /tmp/mid "markitdown[docx,pptx,xlsx]"   # not in the venv
    # then write each file of benchmarks.formats.large_files(random.Random(7)) into /tmp/fl
    PYTHONPATH=/tmp/mid .venv/bin/python benchmarks/experiments/markitdown_compare.py /tmp/fl
"""

import os
import sys
import time

from markitdown import MarkItDown


def main(folder: str) -> None:
    converter = MarkItDown()
    for name in sorted(os.listdir(folder)):
        began = time.perf_counter()
        try:
            text, error = converter.convert(os.path.join(folder, name)).text_content, ""
        except Exception as exc:  # report and go on: the comparison is what fails where
            text, error = "", f"{type(exc).__name__}: {str(exc)[:80]}"
        seconds = time.perf_counter() - began
        headers = sum(line.startswith(("| SKU", "| Model")) for line in text.split("\n"))
        print(f"{name:18} {seconds:6.2f} s {len(text):9,} chars, header rows {headers} {error}")


if __name__ == "__main__":
    main(sys.argv[1])
