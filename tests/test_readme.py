"""The README and the docs it links tell the truth: CI runs the README's test command, their examples are ones the
tests exercise, and every link in them leads somewhere (a file, and a heading where it names one)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = [ln for ln in ci.splitlines() if "python -m pytest" in ln and not ln.startswith("#")]
    assert command and command[0].strip() in README  # the README's command first; then the newest transformers
    assert len(command) <= 2 and all('-m "not gpu"' in ln for ln in command[1:])
    assert re.search(r"with the newest\s+transformers", README)


def test_check_examples_point_at_real_files():
    for page in PAGES:
        for task, candidate in re.findall(r"cudagent check (\S+\.py) (\S+)", page.read_text()):
            assert (ROOT / task).is_file(), (page.name, task)
            assert (ROOT / candidate).exists(), (page.name, candidate)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores dropped, spaces hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_every_link_in_the_readme_and_the_docs_leads_somewhere():
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue  # the web: not checked here
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists() or (anchor and where.suffix == ".md" and anchor not in _anchors(where)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
    assert len(README.splitlines()) <= 300  # the front door stays one a newcomer reads in ten minutes
