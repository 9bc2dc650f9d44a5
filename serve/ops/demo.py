"""`make demo`: the appliance end to end, as a user meets it.

Starts Ray and the Grounded application, creates an API key per demo tenant, uploads the
bundled sample corpus through the OpenAI-compatible API, asks questions with the official
`openai` client and prints each answer with its cited sources, then keeps serving until
Ctrl-C (`--once`: stops after printing).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "samples" / "corpus"  # the repository's samples/
QUESTIONS = {
    "acme": [
        "How many days of annual leave do employees get, and how many can be carried over?",
        "What power supply does the GX-4200 controller need?",
        "Combien de jours de télétravail par semaine sont autorisés ?",
        "Who won the 1998 football world cup?",
    ],
    "globex": ["Quel est le numéro du contrat de maintenance et sa durée ?"],
    "initech": [  # a spreadsheet, a slide deck and a scanned page (samples/make_office.py)
        "How many large cardboard boxes are in stock in Rotterdam?",
        "When does the Lyon depot open?",
        "How many pallets of cardboard boxes came with delivery note DN-20931?",
    ],
}


def upload(client, tenant: str) -> None:
    present = {f.filename for f in client.files.list().data}
    for path in sorted((CORPUS / tenant).iterdir()):
        if path.name in present:
            print(f"   unchanged {path.name}")
            continue
        created = client.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        print(f"   uploaded  {path.name} -> {created.id}")


def ask(client, question: str) -> None:
    print(f"\n?  {question}")
    completion = client.chat.completions.create(
        model="grounded", messages=[{"role": "user", "content": question}], max_tokens=160
    )
    print(f"=  {completion.choices[0].message.content}")
    extension = completion.model_extra.get("grounded", {})
    for citation in extension.get("citations", []):
        page = f", page {citation['page']}" if citation.get("page") else ""
        how = " (inferred)" if citation.get("inferred") else ""
        section = " > ".join(citation.get("heading_path") or [])
        print(f"   [{citation['number']}] {citation['filename']}{page}  {section}  "
              f"support {citation['support']:.2f}{how}")  # fmt: skip
        if citation.get("quote") is not None:
            check = "verified" if citation.get("verified") else "NOT found in the source"
            print(f"       quote ({check}): {citation['quote']}")
    usage = completion.usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    print(f"   ({usage.prompt_tokens} prompt tokens, {cached} from the prefix cache, "
          f"{usage.completion_tokens} generated)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("data/demo"))
    parser.add_argument("--config", type=Path, default=Path("configs/cpu.yaml"))
    parser.add_argument("--once", action="store_true", help="stop after the questions")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.basicConfig(level=logging.WARNING)

    import openai

    from serve.config import load_config
    from serve.identity.keys import key_store
    from serve.ops import up

    config = load_config(args.config, data_dir=args.data_dir)
    print("== starting the appliance (Ray, embedder, shards, vLLM generator; about a minute)")

    def show(running: up.Running) -> None:
        keys = {tenant: key_store(config).create(tenant, name="demo")[1]
                for tenant in QUESTIONS}  # fmt: skip
        for tenant, key in keys.items():
            client = openai.OpenAI(base_url=running.api_url, api_key=key, timeout=600)
            print(f"\n== tenant {tenant!r}: upload the sample documents")
            upload(client, tenant)
            print(f"\n== tenant {tenant!r}: questions (answers cite only {tenant}'s files)")
            for question in QUESTIONS[tenant]:
                ask(client, question)
        print(f"\nAPI        {running.api_url}")
        if running.dashboard_url:
            print(f"dashboard  {running.dashboard_url}")
        print(f"metrics    {running.metrics_url}")
        for tenant, key in keys.items():
            print(f"key ({tenant}) {key}")
        if not args.once:
            print("\nserving; try it with any OpenAI client. Ctrl-C stops.", flush=True)

    up.run_in_foreground(config, show, wait=not args.once, dashboard=not args.once)


if __name__ == "__main__":
    main()
