#!/usr/bin/python3
"""cli2man.py: the dnslb(1) man page, generated from docs/cli.md.

    cli2man.py docs/cli.md VERSION > dnslb.1

The build runs it (CMakeLists.txt), so the man page is docs/cli.md in roff:
the title line becomes NAME, the first code block SYNOPSIS, the text before
the first table DESCRIPTION, the option table OPTIONS, and every "## "
section a section of its own (tables as tagged paragraphs). Markdown links
keep their text; `code` is set in bold.
"""

import re
import sys


def inline(text):
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)       # links: their text
    text = text.replace("\\", "\\e")
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) >= 2:
            out.append("\\fB" + p[1:-1].replace("-", "\\-") + "\\fR")
        else:
            out.append(p.replace("**", "").replace("-", "\\-"))
    line = "".join(out)
    # non-ASCII characters as groff's Unicode escapes (\[u2013] for an en dash)
    line = "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in line)
    # a line starting with . or ' would be a roff request
    return re.sub(r"^([.'])", r"\\&\1", line)


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def main():
    src, version = sys.argv[1], sys.argv[2]
    with open(src) as f:
        lines = f.read().splitlines()
    out = ['.\\" generated from docs/cli.md by cmake/cli2man.py: do not edit',
           '.TH DNSLB 1 "" "dnslb %s" "User Commands"' % version,
           ".SH NAME",
           "dnslb \\- DNS load balancer and packet-cache proxy with dnsdist's configuration"]
    # the first code block is the synopsis, whatever text comes before it
    first = lines.index(next(l for l in lines if l.startswith("```")))
    end = first + 1 + lines[first + 1:].index(next(l for l in lines[first + 1:]
                                                      if l.startswith("```")))
    out.append(".SH SYNOPSIS")
    out.extend(".B " + inline(b) for b in lines[first + 1:end])
    out.append(".SH DESCRIPTION")
    lines = lines[:first] + lines[end + 1:]
    i = 0
    section = "DESCRIPTION"
    para = []

    def flush():
        if para:
            out.append(".PP")
            out.append(inline(" ".join(para)))
            para.clear()

    while i < len(lines):
        l = lines[i]
        if l.startswith("# "):
            i += 1
            continue
        if l.startswith("```"):
            flush()
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            i += 1
            out.append(".PP")
            out.append(".nf")
            out.extend(inline(b) for b in block)
            out.append(".fi")
            continue
        if l.startswith("## "):
            flush()
            section = l[3:].strip().upper()
            out.append(".SH " + inline(section))
            i += 1
            continue
        if l.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            head, body = rows[0], [r for r in rows[2:]]
            if head[0] == "option":
                out.append(".SH OPTIONS")
            for r in body:
                out.append(".TP")
                out.append(inline(r[0]))
                out.append(inline(" ".join(r[1:])))
            continue
        if not l.strip():
            flush()
        else:
            para.append(l.strip())
        i += 1
    flush()
    out += [".SH SEE ALSO", "dnsdist(1); the documentation in /usr/share/doc/dnslb."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
