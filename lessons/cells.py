"""A lesson's cells, read from its `# %%` markers (the format VS Code, Jupyter's jupytext and Spyder share), with the
line each starts on, for the stepper (the notebook writer reads the same cells with jupytext; a test holds the two
readings equal)."""
from dataclasses import dataclass


@dataclass
class Step:
    """One code cell with the markdown cells just before it; code_line is the file line its code starts on."""
    markdown: str
    code: str
    code_line: int

    def title(self):
        for line in (self.markdown + "\n" + self.code).splitlines():
            text = line.strip().lstrip("#").strip()
            if text:
                return text[:70]
        return ""


def raw_cells(path):
    """(kind, text, first line) for each cell: kind "markdown" (its '# ' marks removed) or "code"."""
    cells, kind, lines, start = [], "code", [], 1
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.startswith("# %%"):
                cells.append((kind, lines, start))
                kind, lines, start = ("markdown" if "[markdown]" in line else "code"), [], number + 1
            else:
                lines.append(line)
    cells.append((kind, lines, start))
    out = []
    for kind, lines, start in cells:
        if not any(line.strip() for line in lines):
            continue
        if kind == "markdown":
            text = "".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines)
        else:
            text = "".join(lines)
        out.append((kind, text, start))
    return out


def read_cells(path):
    """The lesson as Steps: each code cell with its markdown."""
    steps, markdown = [], []
    for kind, text, start in raw_cells(path):
        if kind == "markdown":
            markdown.append(text.rstrip())
        else:
            steps.append(Step("\n\n".join(markdown), text, start))
            markdown = []
    if markdown:
        steps.append(Step("\n\n".join(markdown), "", 1))
    return steps
