"""Regenerate the sample corpus PDFs (committed; run only after editing the text below).

    .venv/bin/python samples/make_pdfs.py

Uses fpdf2 (a dev dependency). Core PDF fonts cover Latin-1, which is enough for French.
"""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF

HERE = Path(__file__).parent / "corpus"

SAFETY_MANUAL = (
    "GX-4200 Safety Manual",
    [
        (
            "1. Intended use",
            [
                "The GX-4200 collaborative arm handles parts of up to 12 kg in industrial settings. "
                "It must not be used to lift people, in explosive atmospheres, or outdoors.",
                "Before first use, a risk assessment according to ISO 10218-2 must be carried out "
                "for every application. The assessment is repeated whenever the tool or the task "
                "changes.",
            ],
        ),
        (
            "2. Speed and force limits",
            [
                "In collaborative mode the tool speed is limited to 250 mm/s. The contact force "
                "limit is 140 N for the hands and 65 N for the face region.",
                "The limits are set in the controller under Safety > Collaborative and protected by "
                "a safety password that only the site safety officer holds.",
            ],
        ),
        (
            "3. Emergency stop",
            [
                "Two emergency stop buttons are supplied: one on the teach pendant and one on the "
                "controller cabinet. Test both buttons at the start of every shift.",
                "After an emergency stop, the arm restarts only when the operator releases the "
                "button and confirms the restart on the pendant. Error E-310 means that the stop "
                "circuit is open.",
            ],
        ),
        (
            "4. Lockout procedure",
            [
                "Before maintenance, switch off the controller, lock the main switch with a personal "
                "padlock and wait five minutes for the capacitors to discharge.",
            ],
        ),
    ],
)

CONTRAT = (
    "Contrat de maintenance 44-A/2024",
    [
        (
            "Article 1 - Objet",
            [
                "Le présent contrat, reference 44-A/2024, confie à la société Nordlift SARL la "
                "maintenance des portes sectionnelles et des niveleurs de quai de l'entrepôt Globex "
                "de Lille.",
            ],
        ),
        (
            "Article 2 - Délais d'intervention",
            [
                "Le prestataire intervient sous quatre heures ouvrées pour toute panne bloquant un "
                "quai, et sous deux jours ouvrés pour les autres pannes.",
                "Chaque intervention donne lieu à un rapport signé par le chef d'équipe present.",
            ],
        ),
        (
            "Article 3 - Prix et durée",
            [
                "Le forfait annuel est de 18 400 euros hors taxes, payable par trimestre. Le contrat "
                "prend effet le 1er janvier 2024 pour une durée de trois ans.",
                "Il peut être résilié par l'une ou l'autre partie avec un préavis de trois mois.",
            ],
        ),
    ],
)


def write_pdf(path: Path, title: str, sections: list[tuple[str, list[str]]]) -> None:
    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_author("Grounded sample corpus")
    for index, (heading, paragraphs) in enumerate(sections):
        if index % 2 == 0:  # two sections per page, so the PDF has several pages
            pdf.add_page()
            if index == 0:
                pdf.set_font("Helvetica", "B", 16)
                pdf.multi_cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(4)
        pdf.start_section(heading)
        pdf.set_font("Helvetica", "B", 13)
        pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", "", 11)
        for paragraph in paragraphs:
            pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(3)
    pdf.output(str(path))


if __name__ == "__main__":
    write_pdf(HERE / "acme" / "gx-4200-safety-manual.pdf", *SAFETY_MANUAL)
    write_pdf(HERE / "globex" / "contrat-maintenance.pdf", *CONTRAT)
