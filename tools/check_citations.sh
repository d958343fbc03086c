#!/usr/bin/env bash
# Checks the model-note citations of the repository: every file under src/ tools/ tests/
# python/ include/ docs/ and README.md (tracked, or new and not ignored) may cite
#   docs/<path>.md            the file must exist
#   docs/<path>.md §N[.M] ... every section named after the path (up to the next path on the
#                             line) must be a heading "## N. Title" / "### N.M Title" there
# and inside docs/, also a sibling note by bare name ("attention.md §6.2") or a section of the
# note itself ("§4"). Citations of the external spec files that used to live outside the
# repository (the model spec and its audit, by their old file names, or an audit item such as
# "AUDIT O2") are reported wherever they appear.
# --strict also reports bare "spec N.N" citations (the same external spec by another name).
#
# Usage: tools/check_citations.sh [--strict]
# Prints file:line: problem for each bad citation and exits 1 if there is any; otherwise
# prints one summary line and exits 0. grep + awk only: well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

strict=0
case "${1:-}" in
  --strict) strict=1 ;;
  "") ;;
  *) echo "usage: tools/check_citations.sh [--strict]" >&2; exit 2 ;;
esac

self=tools/check_citations.sh
# Candidate lines only: a .md name, a section sign, an audit id, or (strict) "spec".
pattern='\.md|§|AUDIT'
[[ $strict == 1 ]] && pattern="$pattern|[Ss]pec"

files=()
while IFS= read -r -d '' f; do
  [[ $f != "$self" && -f $f ]] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- src tools tests python include docs README.md)
[[ ${#files[@]} -gt 0 ]] || { echo "no files to check" >&2; exit 2; }

{ grep -nHIE "$pattern" -- "${files[@]}" 2>/dev/null || true; } |
  awk -v strict="$strict" '
function exists(p,   l, r) {
  if (p in known) return known[p]
  r = (getline l < p)
  if (r >= 0) close(p)
  known[p] = (r >= 0)
  return known[p]
}
function load_sections(p,   l) {
  if (p in loaded) return
  loaded[p] = 1
  while ((getline l < p) > 0) {
    if (l ~ /^#+ [0-9]/) {
      sub(/^#+ /, "", l)
      if (match(l, /^[0-9]+(\.[0-9]+)*/)) sections[p SUBSEP substr(l, RSTART, RLENGTH)] = 1
    }
  }
  close(p)
}
function report(what) {
  t = text
  gsub(/^[ \t]+/, "", t)
  if (length(t) > 150) t = substr(t, 1, 147) "..."
  printf "%s:%s: %s: %s\n", file, ln, what, t
  bad++
}
function basename(p,   b) { b = p; sub(/.*\//, "", b); return b }
{
  i = index($0, ":"); file = substr($0, 1, i - 1); rest = substr($0, i + 1)
  j = index(rest, ":"); ln = substr(rest, 1, j - 1); text = substr(rest, j + 1)
  in_docs = (file ~ /^docs\//)
  dir = file; sub(/\/[^\/]*$/, "", dir)

  if (text ~ /AUDIT[ ]+[DO][0-9]/) report("cites the external audit (see docs/model/numerics.md §7 for where each item went)")
  if (strict && !in_docs) {
    lt = tolower(text)
    if (lt ~ /(^|[^a-z_])spec( section| sections)? [0-9][0-9]?(\.[0-9]+)*([^0-9.]|$)/)
      report("\"spec N.N\" cites the external spec: cite docs/model/<note>.md §N")
  }

  # Walk the paths and section signs of the line in order; a section belongs to the last path
  # before it (in docs/, to the note itself before any path).
  target = in_docs ? file : ""
  lastdir = ""
  s = text
  while (match(s, /§[0-9]+(\.[0-9]+)*|[A-Za-z0-9_.\/-]*[A-Za-z0-9_-]\.md/)) {
    tok = substr(s, RSTART, RLENGTH)
    s = substr(s, RSTART + RLENGTH)
    if (substr(tok, 1, 2) == "§") {
      if (target == "" || !exists(target)) continue
      num = substr(tok, 3)
      load_sections(target)
      if (!((target SUBSEP num) in sections)) report("no section " tok " in " target)
      continue
    }
    b = basename(tok)
    if (b == "MODEL.md" || b == "AUDIT.md") {
      p = (index(tok, "/") || !in_docs) ? tok : dir "/" tok
      if (!exists(p)) report(tok " is not in the repository: cite docs/model/<note>.md §N")
      target = ""
      continue
    }
    if (tok ~ /^docs\//) p = tok
    else if (in_docs && index(tok, "/") == 0) p = dir "/" tok
    else if (lastdir != "" && index(tok, "/") == 0) p = lastdir "/" tok
    else if (in_docs && tok !~ /^\.\.?\//) p = tok
    else { target = ""; continue }
    if (!exists(p)) { report("cites " tok ", which does not exist"); target = ""; continue }
    target = p
    if (p ~ /^docs\//) { lastdir = p; sub(/\/[^\/]*$/, "", lastdir) }
    n_cited++
  }
}
END {
  if (bad) { printf "%d bad citation(s)\n", bad; exit 1 }
  printf "citations ok (%d note references checked)\n", n_cited
}'
