#!/usr/bin/env python3
"""Generates web_assets.cc (the chat page embedded in the binary) from the
files in this folder. The build runs it (CMakeLists.txt, server module):
    python3 src/server/web/embed.py OUTPUT.cc
so the page's only copy in the tree is index.html, app.js and style.css.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
FILES = [
    ("index.html", "text/html; charset=utf-8"),
    ("app.js", "text/javascript; charset=utf-8"),
    ("style.css", "text/css; charset=utf-8"),
]
DELIM = "omnibus_web"


def main():
    out = [
        "// GENERATED at build time by src/server/web/embed.py from src/server/web/*.",
        '#include "server/web_assets.h"',
        "",
        "namespace omnibus::server {",
        "namespace {",
        "",
    ]
    for i, (name, _) in enumerate(FILES):
        text = (HERE / name).read_text(encoding="utf-8")
        assert f'){DELIM}"' not in text, f"{name} contains the raw-string delimiter"
        out.append(f'constexpr std::string_view kFile{i} = R"{DELIM}({text}){DELIM}";')
        out.append("")
    out.append("constexpr WebAsset kAssets[] = {")
    for i, (name, ctype) in enumerate(FILES):
        out.append(f'    {{"/{name}", "{ctype}", kFile{i}}},')
    out += [
        "};",
        "",
        "}  // namespace",
        "",
        "const WebAsset* find_web_asset(std::string_view path) {",
        "  for (const WebAsset& a : kAssets) {",
        "    if (a.path == path) return &a;",
        "  }",
        "  return nullptr;",
        "}",
        "",
        "std::span<const WebAsset> web_assets() { return kAssets; }",
        "",
        "}  // namespace omnibus::server",
        "",
    ]
    pathlib.Path(sys.argv[1]).write_text("\n".join(out), encoding="utf-8")


if __name__ == "__main__":
    main()
