"""Links between the documentation pages resolve.

Every link `[text](page.md#anchor)` or `[text](#anchor)` in README.md and
docs/*.md must point to a page that exists and to an anchor on it: a heading,
named as GitHub names it (lowercase; spaces to '-'; punctuation other than
'-' and '_' removed; a repeated slug gets -1, -2, ...), or an explicit
<a id="..."></a> / <a name="..."></a>. A link to a page without an anchor
must name a file that exists. Links to other sites are not checked.
"""

import os
import re

SRC = os.environ.get("DNSLB_SRC", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

LINK = re.compile(r"\]\(([^)\s]*)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages():
    out = [os.path.join(SRC, "README.md")]
    docs = os.path.join(SRC, "docs")
    out += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return out


def slug(text):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # links: their text
    text = re.sub(r"<[^>]+>", "", text)                         # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                         # punctuation
    return text.replace(" ", "-")


def lines_outside_code(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


def anchors(path, cache={}):
    if path not in cache:
        seen, names = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                names.add(s if k == 0 else "%s-%d" % (s, k))
            names.update(ANCHOR.findall(line))
        cache[path] = names
    return cache[path]


def broken_links():
    bad = []
    for page in pages():
        for n, line in lines_outside_code(page):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):      # http:, mailto:, ...
                    continue
                file, _, anchor = target.partition("#")
                if file and not file.endswith(".md"):
                    if not os.path.exists(os.path.normpath(
                            os.path.join(os.path.dirname(page), file))):
                        bad.append("%s:%d: %s: no such file" % (page, n, target))
                    continue
                dest = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
                if not os.path.exists(dest):
                    bad.append("%s:%d: %s: no such page" % (page, n, target))
                elif anchor and anchor not in anchors(dest):
                    bad.append("%s:%d: %s: no such anchor" % (page, n, target))
    return [b.replace(SRC + os.sep, "") for b in bad]


def test_slug_as_github_makes_it():
    assert slug("The park clock (2026-12-03, fourth)") == "the-park-clock-2026-12-03-fourth"
    assert slug("In-process micro-benchmark (`build-perf/perf/dnslb-bench-cache`)") == \
        "in-process-micro-benchmark-build-perfperfdnslb-bench-cache"
    assert slug("Where a hit's time goes") == "where-a-hits-time-goes"
    assert slug("setLocal(addr, {opts})") == "setlocaladdr-opts"


def test_every_link_between_pages_resolves():
    bad = broken_links()
    assert not bad, "broken links:\n" + "\n".join(bad)


if __name__ == "__main__":
    print("\n".join(broken_links()))
