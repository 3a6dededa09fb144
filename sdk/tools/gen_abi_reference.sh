#!/usr/bin/env bash
# Generate docs/abi-reference.md from the plugin ABI headers: every macro, enum, struct, field, slot and
# typedef with its doc comment, in header order. bash + POSIX awk only (runs with mawk), no Python.
#
# Usage:
#   gen_abi_reference.sh INCLUDE_DIR                          # Markdown on stdout
#   gen_abi_reference.sh --out FILE INCLUDE_DIR               # Markdown into FILE
#   gen_abi_reference.sh --check COMMITTED [--out FILE] INCLUDE_DIR
#                                                             # regenerate, fail with a diff if COMMITTED differs
#   gen_abi_reference.sh --frozen-list INCLUDE_DIR            # "field TYPE MEMBER", "enum NAME", "macro NAME int|string"
#                                                             # lines, for freeze_abi_layout.sh
# INCLUDE_DIR is the folder holding oar/plugin/*.h (e.g. sdk/include).
#
# The parser knows the house style of those headers (see types.h): block comments before declarations,
# trailing comments after them, `/* ---- section ---- */` markers inside function tables, one declaration
# per statement. Regenerate after every header change:
#   sdk/tools/gen_abi_reference.sh --out docs/abi-reference.md sdk/include
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

mode=markdown check='' out=''
while [[ $# -gt 0 ]]; do
  case "$1" in
    --check) check=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --frozen-list) mode=frozen; shift ;;
    -h|--help) usage ;;
    -*) echo "gen_abi_reference.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -eq 1 ]] || usage
dir="$1/oar/plugin"
[[ -f "$dir/plugin.h" ]] || { echo "gen_abi_reference.sh: no $dir/plugin.h" >&2; exit 2; }

# Reading order: the umbrella's concepts first, then the optional sub-interfaces; any header not listed
# here is appended in name order, so a new header is never silently left out. ops.h is not ABI layout: it
# is generated from the op schemas (names only, self-documented) and kept in sync by sdk.op_header_in_sync.
order="version types status plugin device kernel ccl compiler profiler"
generated="ops"
files=()
for h in $order; do [[ -f "$dir/$h.h" ]] && files+=("$dir/$h.h"); done
for f in "$dir"/*.h; do
  b=$(basename "$f" .h)
  [[ " $order $generated " == *" $b "* ]] || files+=("$f")
done

major=$(awk '$1 == "#define" && $2 == "OAR_PLUGIN_ABI_MAJOR" { print $3 }' "$dir/version.h")
minor=$(awk '$1 == "#define" && $2 == "OAR_PLUGIN_ABI_MINOR" { print $3 }' "$dir/version.h")

generate() {
  awk -v mode="$mode" -v major="$major" -v minor="$minor" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function squash(s) { gsub(/[ \t]+/, " ", s); return trim(s) }
# Markdown-safe prose: "<", ">" and "*" would be read as HTML or emphasis; "|" would split a table cell.
function prose(s,   n, parts, i, seg, out) {
  n = split(s, parts, "`"); out = ""
  for (i = 1; i <= n; i++) {
    seg = parts[i]
    if (i % 2 == 1) { gsub(/&/, "\\&amp;", seg); gsub(/</, "\\&lt;", seg); gsub(/>/, "\\&gt;", seg); gsub(/\*/, "\\*", seg) }
    out = out (i > 1 ? "`" : "") seg
  }
  return out
}
function cell(s) { s = prose(s); gsub(/\|/, "\\|", s); return s }
function code(s) { gsub(/\|/, "\\|", s); return "`" s "`" }
function emit(s) { if (mode == "markdown") print s }
function frozen(s) { if (mode == "frozen") print s }

# Comment text of one line inside a block comment: drop the leading " * ".
function comment_line(s) { s = trim(s); sub(/^\*\/?/, "", s); sub(/^ /, "", s); return s }
function is_rule(s) { return s ~ /^[-=]+$/ }
# s without its /* ... */ comments.
function strip_comments(s,   out, p, q) {
  out = ""
  while ((p = index(s, "/*")) > 0) {
    out = out substr(s, 1, p - 1)
    s = substr(s, p + 2)
    q = index(s, "*/")
    if (q == 0) return out
    s = substr(s, q + 2)
  }
  return out s
}
# Position of the first ";" outside comments (0 when the declaration continues on the next line).
function end_of_decl(s,   i, n, incom, c2) {
  incom = 0; n = length(s)
  for (i = 1; i <= n; i++) {
    c2 = substr(s, i, 2)
    if (!incom && c2 == "/*") { incom = 1; i++; continue }
    if (incom && c2 == "*/") { incom = 0; i++; continue }
    if (!incom && substr(s, i, 1) == ";") return i
  }
  return 0
}

function flush_macros(   i) {
  if (nmacro == 0) return
  emit("")
  emit("| Macro | Value | Description |")
  emit("|---|---|---|")
  for (i = 1; i <= nmacro; i++) emit("| " code(macro_name[i]) " | " code(macro_value[i]) " | " cell(macro_doc[i]) " |")
  nmacro = 0
}
function add_macro(name, value, doc,   i) {
  for (i = 1; i <= nmacro; i++) if (macro_name[i] == name) { macro_value[i] = macro_value[i] "` or `" value; return }
  if (nmacro == 0 && pending != "") { emit(""); emit(prose(pending)); pending = "" }
  nmacro++; macro_name[nmacro] = name; macro_value[nmacro] = value; macro_doc[nmacro] = doc
  if (name ~ /^OAR_/ && name !~ /^OAR_PLUGIN_EXPORT$/ && name !~ /\(/ && name !~ /_$/) frozen("macro " name " " (value ~ /^"/ ? "string" : "int"))
}
function heading(kind, name) {
  flush_macros()
  emit(""); emit("### " kind " `" name "`")
  if (pending != "") { emit(""); emit(prose(pending)); pending = "" }
}
function add_row(field, type, doc) {
  # The two fields every crossing struct starts with (types.h) say the same thing everywhere.
  if (doc == "" && field == "struct_size" && type == "size_t") doc = "Set by whoever fills the struct to OAR_STRUCT_SIZE(type, last field) of the headers it was compiled against."
  if (doc == "" && field == "ext" && type == "const void*") doc = "Extension pointer; NULL unless documented."
 nrow++; row_field[nrow] = field; row_type[nrow] = type; row_doc[nrow] = doc; row_section[nrow] = "" }
function flush_struct(name,   i, f) {
  emit("")
  emit("| Field | Type | Description |")
  emit("|---|---|---|")
  for (i = 1; i <= nrow; i++) {
    if (row_section[i] != "") { emit("| **" cell(row_section[i]) "** | | |"); continue }
    emit("| " code(row_field[i]) " | " code(row_type[i]) " | " cell(row_doc[i]) " |")
    f = row_field[i]
    frozen("field " name " " f)
  }
  nrow = 0
}
# One complete declaration inside a struct (text up to ";" with its inline comments).
function struct_decl(d, doc,   name, type, body) {
  body = d; sub(/;[ \t]*$/, "", body)
  if (match(body, /\(\*[A-Za-z_0-9]+\)/)) {
    name = substr(body, RSTART + 2, RLENGTH - 3)
    add_row(name, squash(body), doc)
    return
  }
  type = strip_comments(body)
  array = ""
  if (match(type, /\[[^]]*\][ \t]*$/)) { array = substr(type, RSTART, RLENGTH); type = substr(type, 1, RSTART - 1) }
  type = trim(type)
  match(type, /[A-Za-z_0-9]+$/)
  name = substr(type, RSTART, RLENGTH)
  type = trim(substr(type, 1, RSTART - 1)) array
  add_row(name, squash(type), doc)
}
function typedef_decl(d,   name, body) {
  body = d; sub(/;[ \t]*$/, "", body)
  if (match(body, /\(\*[A-Za-z_0-9]+\)/)) name = substr(body, RSTART + 2, RLENGTH - 3)
  else { tmp = trim(strip_comments(body)); match(tmp, /[A-Za-z_0-9]+$/); name = substr(tmp, RSTART, RLENGTH) }
  heading("typedef", name)
  emit(""); emit("```c"); emit(squash(body) ";"); emit("```")
  if (trailing_doc != "") { emit(""); emit(prose(trailing_doc)) }
}

FNR == 1 {
  if (NR > 1) { flush_macros() }
  path = FILENAME; sub(/^.*\/oar\/plugin\//, "oar/plugin/", path)
  emit(""); emit("## `" path "`")
  state = "file"; pending = ""; in_comment = 0; decl = ""; nmacro = 0; nrow = 0; depth = 0; seen_guard = 0; cont = ""
}

{
  line = $0
  sub(/[ \t\r]+$/, "", line)

  # ---- inside a block comment ------------------------------------------------------------------
  if (in_comment) {
    done = index(line, "*/")
    text = done ? substr(line, 1, done - 1) : line
    text = comment_line(text)
    if (is_rule(text)) saw_rule = 1
    if (!is_rule(text)) {
      if (ctext != "" && text != "") ctext = ctext (keep_lines ? "\n" : " ") text
      else if (text != "") ctext = text
      else if (keep_lines && ctext != "") ctext = ctext "\n"
    }
    if (!done) next
    in_comment = 0
    if (comment_target == "file") {
      gsub(/\n\n+/, "\n\n", ctext); sub(/\n+$/, "", ctext)
      emit(""); emit(prose(ctext))
    } else if (comment_target == "section") {
      sub(/^-+ /, "", ctext); sub(/ -+$/, "", ctext); ctext = squash(ctext)
      add_row("", "", ""); row_section[nrow] = ctext
    } else if (comment_target == "row") {
      row_doc[nrow] = trim(row_doc[nrow] " " ctext)
    } else if (comment_target == "typedef_trailing") {
      trailing_doc = trim(trailing_doc " " ctext)
    } else if (comment_target == "enum_row") {
      enum_doc[nenum] = trim(enum_doc[nenum] " " ctext)
    } else {
      pending = trim(pending == "" ? ctext : pending " " ctext)
      pending_banner = saw_rule
    }
    next
  }

  # ---- a #define continued with a backslash -------------------------------------------------------
  if (cont != "") {
    t = line; more = sub(/\\$/, "", t)
    cont = cont " " trim(t)
    if (more) next
    line = cont; cont = ""
  } else if (line ~ /^#define/ && line ~ /\\$/) {
    t = line; sub(/\\$/, "", t); cont = trim(t); next
  }

  t = trim(line)
  if (t == "") next

  # ---- comment lines -------------------------------------------------------------------------------
  if (substr(t, 1, 2) == "/*" && decl == "") {
    rest = substr(t, 3)
    close_at = index(rest, "*/")
    if (close_at) {
      text = trim(substr(rest, 1, close_at - 1))
      if (text ~ /^-+ /) {  # "---- section ----": a group of slots
        sub(/^-+ /, "", text); sub(/ -+$/, "", text)
        if (state == "struct") { add_row("", "", ""); row_section[nrow] = text }
        next
      }
      pending = trim(pending == "" ? text : pending " " text)
      pending_banner = 0
      next
    }
    in_comment = 1; ctext = comment_line(rest); saw_rule = is_rule(ctext); if (saw_rule) ctext = ""
    keep_lines = (state == "file")
    comment_target = (state == "file") ? "file" : "pending"
    if (state == "struct" && ctext ~ /^-+ /) comment_target = "section"  # a section title on two lines
    next
  }

  # ---- preprocessor ------------------------------------------------------------------------------------
  if (t ~ /^#/) {
    if (state == "file") state = "top"
    if (t ~ /^#define[ \t]/) {
      d = t; sub(/^#define[ \t]+/, "", d)
      doc = ""
      if (match(d, /\/\*.*\*\/$/)) { doc = trim(substr(d, RSTART + 2, RLENGTH - 4)); d = trim(substr(d, 1, RSTART - 1)) }
      if (match(d, /^[A-Za-z_0-9]+\([^)]*\)/)) { name = substr(d, 1, RLENGTH); value = trim(substr(d, RLENGTH + 1)) }
      else { match(d, /^[A-Za-z_0-9]+/); name = substr(d, 1, RLENGTH); value = trim(substr(d, RLENGTH + 1)) }
      if (name ~ /_H_$/) next  # include guard
      # A plain comment right above a macro documents it; a banner comment introduces the group.
      if (doc == "" && pending != "" && !pending_banner) { doc = pending; pending = "" }
      add_macro(name, value, doc)
    }
    next
  }
  if (state == "file") state = "top"
  if (t ~ /^extern "C"/ || t ~ /^}[ \t]*\/\* extern "C" \*\/$/) next

  # ---- enums -------------------------------------------------------------------------------------------
  if (state == "top" && t ~ /^typedef enum [A-Za-z_0-9]+ \{$/) {
    name = t; sub(/^typedef enum /, "", name); sub(/ \{$/, "", name)
    heading("enum", name)
    state = "enum"; nenum = 0
    next
  }
  if (state == "enum") {
    if (t ~ /^}/) {
      emit(""); emit("| Enumerator | Value | Description |"); emit("|---|---|---|")
      for (i = 1; i <= nenum; i++) emit("| " code(enum_name[i]) " | " code(enum_value[i]) " | " cell(enum_doc[i]) " |")
      state = "top"
      next
    }
    if (substr(t, 1, 2) == "/*") { in_comment = 1; ctext = comment_line(substr(t, 3)); keep_lines = 0; comment_target = "pending"; next }
    doc = ""
    if ((p = index(t, "/*")) > 0) {
      c = substr(t, p + 2); t = trim(substr(t, 1, p - 1))
      if ((q = index(c, "*/")) > 0) doc = trim(substr(c, 1, q - 1))
      else { doc = trim(c); in_comment = 1; ctext = ""; keep_lines = 0; comment_target = "enum_row" }
    }
    sub(/,$/, "", t)
    split(t, kv, "=")
    nenum++; enum_name[nenum] = trim(kv[1]); enum_value[nenum] = trim(kv[2])
    enum_doc[nenum] = trim(pending " " doc); pending = ""
    if (enum_name[nenum] !~ /_$/) frozen("enum " enum_name[nenum])
    next
  }

  # ---- structs ----------------------------------------------------------------------------------------
  if (state == "top" && t ~ /^typedef struct [A-Za-z_0-9]+ \{$/) {
    name = t; sub(/^typedef struct /, "", name); sub(/ \{$/, "", name)
    heading("struct", name)
    state = "struct"; depth = 1; nrow = 0; struct_name = name
    next
  }
  if (state == "struct") {
    if (decl == "" && t ~ /^(union|struct)[ \t]*\{$/) {
      depth++; add_row("", (t ~ /^union/) ? "union" : "struct", pending); pending = ""
      open_row[depth] = nrow
      next
    }
    if (decl == "" && t ~ /^}/) {
      member = t; sub(/^}[ \t]*/, "", member); sub(/;.*$/, "", member)
      if (depth > 1) {
        r = open_row[depth]
        row_field[r] = member
        for (i = r + 1; i <= nrow; i++) if (row_section[i] == "") row_field[i] = member "." row_field[i]
        depth--
        next
      }
      flush_struct(struct_name)
      state = "top"
      next
    }
    decl = (decl == "") ? t : decl " " t
    # Complete at the first ";" outside comments; what follows is the trailing doc comment.
    semi = end_of_decl(decl)
    if (semi == 0) next
    trailing = trim(substr(decl, semi + 1)); body = substr(decl, 1, semi)
    doc = pending; pending = ""
    open_trailing = 0
    if (substr(trailing, 1, 2) == "/*") {
      c = substr(trailing, 3)
      if ((q = index(c, "*/")) > 0) doc = trim(doc " " trim(substr(c, 1, q - 1)))
      else { doc = trim(doc " " trim(c)); open_trailing = 1 }
    }
    struct_decl(body, doc)
    decl = ""
    if (open_trailing) { in_comment = 1; ctext = ""; keep_lines = 0; comment_target = "row" }
    next
  }

  # ---- other typedefs (opaque structs, handles, function types) ---------------------------------------
  if (state == "top" && (decl != "" || t ~ /^typedef /)) {
    decl = (decl == "") ? t : decl " " t
    semi = end_of_decl(decl)
    if (semi == 0) next
    trailing = trim(substr(decl, semi + 1)); body = substr(decl, 1, semi)
    trailing_doc = ""
    if (substr(trailing, 1, 2) == "/*") { c = substr(trailing, 3); q = index(c, "*/"); trailing_doc = trim(q ? substr(c, 1, q - 1) : c) }
    typedef_decl(body)
    decl = ""
    next
  }
}

END { flush_macros() }
' "${files[@]}"
}

if [[ $mode == frozen ]]; then
  generate
  exit 0
fi

render() {
  cat <<EOF
# Oar plugin ABI reference (ABI ${major}.${minor})

<!-- GENERATED by sdk/tools/gen_abi_reference.sh from sdk/include/oar/plugin/*.h. Do not edit by hand:
     change the headers, then run  sdk/tools/gen_abi_reference.sh --out docs/abi-reference.md sdk/include
     (the test sdk.abi_reference_in_sync fails until you do). -->

Every macro, enum, struct, field, function-table slot and typedef of the C ABI, with the doc comment it has
in the header, in header order. The headers are the source of truth; the rules that hold across all of
them are in \`oar/plugin/types.h\` (below), the versioning policy in [abi-versioning.md](abi-versioning.md),
and how to implement a plugin in [vendor-guide.md](vendor-guide.md). "(optional)" slots may be NULL.

Headers:
EOF
  for f in "${files[@]}"; do
    b=${f##*/}
    echo "- [\`oar/plugin/$b\`](#oarplugin${b%.h}h)"
  done
  generate
}

if [[ -n $check ]]; then
  tmp=${out:-$(mktemp)}
  render > "$tmp"
  if ! diff -u "$check" "$tmp"; then
    echo
    echo "FAIL: $check is out of date with $dir/*.h."
    echo "Regenerate it from the source tree with:"
    echo "  sdk/tools/gen_abi_reference.sh --out docs/abi-reference.md sdk/include"
    [[ -z $out ]] && rm -f "$tmp"
    exit 1
  fi
  [[ -z $out ]] && rm -f "$tmp"
  echo "ok   $check matches $dir/*.h"
elif [[ -n $out ]]; then
  render > "$out"
else
  render
fi
