#!/usr/bin/env bash
# dashboard_check (ctest runs it as dashboard_check): every metric the
# Grafana dashboard deploy/grafana/sluice.json queries is a family sluiced
# exports, so a renamed or removed metric fails the tests instead of
# leaving an empty panel for whoever looks at it during an incident.
#
# What is checked: every PromQL `expr` of the dashboard (the panels'
# targets) and every query of its template variables (label_values(),
# query_result()). From each, the metric names are taken by a small
# tokenizer (below, in Python) that skips string literals (label values,
# regexes, "$deployment"), label matchers {...}, ranges and subqueries
# [...], `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` label
# lists, `offset` durations, numbers, keywords, function and aggregation
# names (an identifier followed by "(") and Grafana's variables ($var,
# ${var}, [[var]], $__rate_interval). A name ending in _bucket, _sum or
# _count stands for its family only when that family is a histogram (or a
# summary, for _sum and _count); a histogram queried by its bare name is an
# error too (no series has that name).
#
# The source of truth is a live scrape: the `# TYPE <name> <type>` lines of
# GET /metrics from a real sluiced, started here on a private redis-server
# (a UNIX socket in a temp dir, as tests/support/ does) with lanes,
# tenants, a group and the HTTP proxy configured, after one ACQUIRE and
# SETTLE per deployment. Why not a grep of agent/metrics.c: metrics.c
# writes every family's HELP and TYPE lines unconditionally, before its
# samples (head() is called ahead of each family's loop, also when it has
# no sample), so the scrape names every family; and the scrape is what
# Prometheus sees: it also catches a family whose name is built at run
# time (the "%s_bucket" of a histogram, names from a table), one compiled
# out, or a literal in metrics.c that is dead code or a comment. If a
# family ever comes to be written only when it has samples or only for
# some configuration, configure that here (the YAML below) or add traffic
# for it; a missing name that agent/metrics.c still spells is flagged as
# such in the output, as a hint.
#
# Usage (from anywhere):
#   tests/dashboard_check.sh [--list] [BUILD_DIR] [DASHBOARD.json]
#   tests/dashboard_check.sh [--list] --metrics SCRAPE.txt [DASHBOARD.json]
# BUILD_DIR holds agent/sluiced (default $SLUICE_BUILD_DIR, else build);
# DASHBOARD defaults to deploy/grafana/sluice.json. --metrics checks
# against a saved scrape instead of starting anything (e.g.
# `curl -s host:9464/metrics > scrape.txt` from a production agent).
# --list prints every family the dashboard queries with its status.
# Prints each missing name and exits 1 when any is missing.
set -euo pipefail

say() { printf 'dashboard_check: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
abspath() { (cd "$(dirname "$1")" && d=$(pwd) && printf '%s/%s\n' "${d%/}" "$(basename "$1")"); }

list=0 scrape_file='' build='' dashboard=''
while [ $# -gt 0 ]; do
  case $1 in
    --list) list=1 ;;
    --metrics) [ $# -ge 2 ] || die "--metrics needs a file"; scrape_file=$(abspath "$2"); shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *.json) dashboard=$(abspath "$1") ;;
    *) build=$(abspath "$1") ;;
  esac
  shift
done
cd "$(dirname "$0")/.."
build=${build:-${SLUICE_BUILD_DIR:-build}}
dashboard=${dashboard:-deploy/grafana/sluice.json}
[ -f "$dashboard" ] || die "$dashboard: no such file"
command -v python3 >/dev/null || die "python3 is needed (deploy/install-deps.sh installs it)"

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-dashboard-check.XXXXXX")
redis_pid='' sluiced_pid=''
stop_pid() { # pid: TERM, then KILL after 5 s; reaps it
  local pid=$1 _
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_pid "$sluiced_pid"
  stop_pid "$redis_pid"
  rm -rf "$T"
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT TERM

# ---- the scrape -----------------------------------------------------------------

scrape_live() {
  local sluiced=$build/agent/sluiced
  [ -x "$sluiced" ] || die "$sluiced is missing or not executable (build the sluiced target, or pass BUILD_DIR)"
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    die "redis-server and redis-cli are needed (deploy/install-deps.sh installs them)"
  fi

  redis-server --port 0 --unixsocket "$T/redis.sock" --unixsocketperm 700 --save "" --appendonly no \
    --dir "$T" >"$T/redis.log" 2>&1 &
  redis_pid=$!
  local _
  for _ in $(seq 100); do
    [ "$(redis-cli -s "$T/redis.sock" ping 2>/dev/null)" = PONG ] && break
    kill -0 "$redis_pid" 2>/dev/null || { cat "$T/redis.log" >&2; die "redis-server exited during start"; }
    sleep 0.05
  done
  [ "$(redis-cli -s "$T/redis.sock" ping 2>/dev/null)" = PONG ] || die "redis-server did not answer PING"

  # The metrics endpoint takes HOST:PORT only: a random port, another one
  # when it is taken (sluiced exits at start when it cannot listen).
  local port up=0 _
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    cat >"$T/sluiced.yaml" <<EOF
redis:
  url: unix://$T/redis.sock
agent:
  socket: $T/agent.sock
  metrics: 127.0.0.1:$port
  http:
    listen: unix:$T/http.sock
deployments:
  dash-a:
    rpm: 6000
    tpm: 6000000
    lanes:
      interactive: { priority: 0, max_wait_ms: 5000 }
      batch: { priority: 1, max_wait_ms: 60000 }
    default_lane: interactive
    tenants:
      chat: { weight: 3 }
      import: { weight: 1 }
  dash-b:
    rpm: 6000
    tpm: 6000000
groups:
  dash:
    members: [dash-a, dash-b]
EOF
    "$sluiced" --config "$T/sluiced.yaml" >"$T/sluiced.log" 2>&1 &
    sluiced_pid=$!
    for _ in $(seq 200); do
      [ "$(redis-cli -s "$T/agent.sock" ping 2>/dev/null)" = PONG ] && { up=1; break; }
      kill -0 "$sluiced_pid" 2>/dev/null || break
      sleep 0.05
    done
    [ $up = 1 ] && break
    stop_pid "$sluiced_pid"
    sluiced_pid=''
    grep -q "cannot listen" "$T/sluiced.log" || { cat "$T/sluiced.log" >&2; die "sluiced did not start"; }
  done
  [ $up = 1 ] || die "sluiced found no free port for its metrics in 20 tries"

  # One request per deployment (a lane, a tenant, a group), settled, and a
  # RETRY: every family has samples, not only its TYPE line.
  local a id
  for a in "dash-a TOKENS 100 LANE interactive TENANT chat" "dash-b TOKENS 10" "dash TOKENS 10 LANE batch"; do
    # shellcheck disable=SC2086 # the words are the command's arguments
    id=$(redis-cli -s "$T/agent.sock" ACQUIRE $a | sed -n 1p)
    case $id in *:*) ;; *) die "ACQUIRE $a answered '$id'" ;; esac
    redis-cli -s "$T/agent.sock" SETTLE "$id" TOKENS 8 STATUS ok >/dev/null
  done
  redis-cli -s "$T/agent.sock" RETRY dash-b >/dev/null

  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  cat <&3 >"$T/scrape.http"
  exec 3<&-
  head -1 "$T/scrape.http" | grep -q '^HTTP/1\.[01] 200' ||
    die "GET /metrics answered: $(head -1 "$T/scrape.http")"
  tr -d '\r' <"$T/scrape.http" | sed '1,/^$/d' >"$T/scrape.txt"
}

if [ -n "$scrape_file" ]; then
  [ -f "$scrape_file" ] || die "$scrape_file: no such file"
  tr -d '\r' <"$scrape_file" >"$T/scrape.txt"
  source_desc=$scrape_file
else
  scrape_live
  source_desc="a live scrape of $build/agent/sluiced"
fi
awk '$1 == "#" && $2 == "TYPE" && NF >= 4 { print $3, $4 }' "$T/scrape.txt" | sort -u >"$T/families"
grep -q '^sluice_info gauge$' "$T/families" ||
  die "$source_desc has no '# TYPE sluice_info gauge' line: not sluiced's metrics"

# ---- the names the dashboard queries ---------------------------------------------

# One line per (name, where): "name<TAB>panel title or variable".
python3 - "$dashboard" >"$T/used" <<'PY'
import json
import re
import sys

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2"}
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_]*)")


class Unsupported(Exception):
    pass


def grafana_vars(s):
    """$__rate_interval, $var, ${var}, ${var:fmt} and [[var]] become 0 (a
    number: never a name). In strings and ranges they go with those."""
    s = re.sub(r"\[\[[A-Za-z0-9_:.]+\]\]", " 0 ", s)
    s = re.sub(r"\$\{[^}]*\}", " 0 ", s)
    return re.sub(r"\$[A-Za-z_][A-Za-z0-9_]*", " 0 ", s)


def skip_string(s, i):
    """s[i] opens a string: the index after it ends."""
    q, i = s[i], i + 1
    while i < len(s):
        if s[i] == "\\" and q != "`":
            i += 2
            continue
        if s[i] == q:
            return i + 1
        i += 1
    raise Unsupported("unterminated string")


def flatten(expr, names):
    """expr with its strings, comments, {...} and [...] blanked out; names
    given as {__name__="x"} are added to names."""
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = skip_string(expr, i)
            out.append(' "" ')
        elif c == "#":
            while i < len(expr) and expr[i] != "\n":
                i += 1
        elif c in "{[":
            close, j, depth = "}" if c == "{" else "]", i + 1, 1
            while j < len(expr) and depth:
                if expr[j] in "\"'`":
                    j = skip_string(expr, j)
                    continue
                depth += (expr[j] == c) - (expr[j] == close)
                j += 1
            if depth:
                raise Unsupported("unbalanced " + c)
            body = expr[i + 1:j - 1]
            if c == "{":
                m = re.search(r"__name__\s*(=~|!=|!~|=)\s*([\"'`])", body)
                if m:
                    if m.group(1) != "=":
                        raise Unsupported("__name__" + m.group(1) + " (a metric name by regex)")
                    end = skip_string(body, m.start(2))
                    names.append(body[m.start(2) + 1:end - 1])
            out.append(" ")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def promql_names(expr):
    names = []
    s = flatten(grafana_vars(expr), names)
    # Label lists of grouping and matching clauses, and offset / @ modifiers.
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?\s*[0-9A-Za-z_.]+", " ", s)
    s = re.sub(r"@\s*(start\s*\(\s*\)|end\s*\(\s*\)|[0-9.]+)", " ", s)
    i = 0
    while i < len(s):
        if s[i].isspace():
            i += 1
            continue
        m = NUMBER.match(s, i)
        if m and m.end() > i and (s[i].isdigit() or s[i] == "."):
            i = m.end()
            continue
        m = IDENT.match(s, i)
        if not m:
            i += 1
            continue
        word, i = m.group(0), m.end()
        rest = s[i:].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue  # a function, an aggregation or a keyword
        names.append(word)
    return names


def split_args(s):
    """Top-level comma-separated arguments of s."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c in "\"'`":
            j = skip_string(s, i)
            cur.append(s[i:j])
            i = j
            continue
        depth += (c in "({[") - (c in ")}]")
        if c == "," and depth == 0:
            args.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    args.append("".join(cur))
    return [a.strip() for a in args]


def variable_names(q):
    """Names a Prometheus template variable's query reads."""
    m = re.match(r"^\s*(label_values|query_result|metrics|label_names)\s*\((.*)\)\s*$", q, re.S)
    if not m:
        return promql_names(q)  # a bare expression (classic query)
    fn, args = m.group(1), split_args(m.group(2))
    if fn == "label_values":
        return promql_names(args[0]) if len(args) >= 2 else []
    if fn == "query_result":
        return promql_names(m.group(2))
    return []


def self_check():
    cases = {
        'sum by (deployment, lane) (rate(a_total{deployment=~"$deployment",lane="x,y"}[$__rate_interval]))'
        ' / on (deployment) group_left (lane) sum without (le) (b_bucket[5m:1m] offset 1h)': ["a_total", "b_bucket"],
        'histogram_quantile(0.95, sum(rate(h_bucket{le!="+Inf"}[5m])) by (le)) > 1e3 and bool c': ["h_bucket", "c"],
        'topk(10, {__name__="d_total", x="}"}) * 3600 # a comment naming e_total': ["d_total"],
        'label_replace(f, "dst", "$1", "src", "(.*)") or ${var:regex} + [[v]] - inf': ["f"],
    }
    for expr, want in cases.items():
        got = promql_names(expr)
        if got != want:
            sys.exit("dashboard_check: the PromQL tokenizer is broken: %r gave %r, not %r" % (expr, got, want))
    if variable_names('label_values(g{instance=~"$instance"}, deployment)') != ["g"] or \
            variable_names("label_values(deployment)") != []:
        sys.exit("dashboard_check: the variable query parser is broken")


self_check()
dash = json.load(open(sys.argv[1]))
found, bad = [], []


def walk(node, where):
    if isinstance(node, dict):
        title = node.get("title") if node.get("type") not in (None, "row") else None
        where = ("panel \"%s\"" % title) if isinstance(title, str) else where
        expr = node.get("expr")
        if isinstance(expr, str) and expr.strip():
            try:
                names = promql_names(expr)
            except Unsupported as e:
                bad.append("%s: %s in: %s" % (where, e, expr))
                names = []
            else:
                if not names:
                    bad.append("%s: no metric name found in: %s" % (where, expr))
            found.extend((n, where) for n in names)
        for k, v in node.items():
            if k != "templating":
                walk(v, where)
    elif isinstance(node, list):
        for v in node:
            walk(v, where)


walk({k: v for k, v in dash.items() if k != "templating"}, "dashboard")
for var in dash.get("templating", {}).get("list", []):
    if var.get("type") != "query":
        continue
    q = var.get("query")
    q = q.get("query", "") if isinstance(q, dict) else (q or "")
    where = "variable $%s" % var.get("name")
    try:
        names = variable_names(q)
    except Unsupported as e:
        bad.append("%s: %s in: %s" % (where, e, q))
        continue
    found.extend((n, where) for n in names)
for b in bad:
    print("dashboard_check: cannot read " + b, file=sys.stderr)
if bad:
    sys.exit(1)
for n, where in found:
    print("%s\t%s" % (n, where))
PY
[ -s "$T/used" ] || die "no metric name found in $dashboard"

# ---- the verdict ------------------------------------------------------------------

# Each name to its family: the name itself, or for a _bucket/_sum/_count of
# a histogram (_sum/_count of a summary) the family it belongs to.
declare -A type_of
while read -r name type; do type_of[$name]=$type; done <"$T/families"
declare -A where_of status_of
missing=0 wrong=0
while IFS=$'\t' read -r name where; do
  fam=$name st=ok
  if [ -n "${type_of[$name]:-}" ]; then
    case ${type_of[$name]} in
      histogram | summary) st="a ${type_of[$name]}: query ${name}_bucket, _sum or _count; no series is named $name" ;;
    esac
  else
    st=missing
    if [[ $name =~ ^(.+)_(bucket|sum|count)$ ]]; then
      base=${BASH_REMATCH[1]}
      case "${BASH_REMATCH[2]}:${type_of[$base]:-}" in
        bucket:histogram | sum:histogram | count:histogram | sum:summary | count:summary) fam=$base st=ok ;;
      esac
    fi
  fi
  # A family's verdict is its worst use's; "queried by" lists the uses
  # behind that verdict.
  if [ -z "${status_of[$fam]:-}" ] || { [ "${status_of[$fam]}" = ok ] && [ "$st" != ok ]; }; then
    status_of[$fam]=$st
    where_of[$fam]=$where
  elif [ "$st" = "${status_of[$fam]}" ] && [[ "; ${where_of[$fam]}; " != *"; $where; "* ]]; then
    where_of[$fam]="${where_of[$fam]}; $where"
  fi
done <"$T/used"

mapfile -t fams < <(printf '%s\n' "${!status_of[@]}" | sort)
for fam in "${fams[@]}"; do
  st=${status_of[$fam]}
  case $st in
    ok) if [ $list = 1 ]; then printf 'dashboard_check: ok       %s\n' "$fam"; fi ;;
    missing)
      missing=$((missing + 1))
      hint=
      if [[ $fam =~ ^(.+)_bucket$ ]]; then hint=" (or the histogram ${BASH_REMATCH[1]})"; fi
      if grep -q "\"$fam\"" agent/metrics.c 2>/dev/null; then
        hint=" (agent/metrics.c names it: written only with samples, or only for some configuration?)"
      fi
      printf 'dashboard_check: missing  %s%s, queried by: %s\n' "$fam" "$hint" "${where_of[$fam]}" ;;
    *)
      wrong=$((wrong + 1))
      printf 'dashboard_check: wrong    %s: %s, queried by: %s\n' "$fam" "$st" "${where_of[$fam]}" ;;
  esac
done
n=${#fams[@]}
if [ $((missing + wrong)) -gt 0 ]; then
  echo "dashboard_check: $dashboard queries $n metric families; $missing not exported by sluiced, $wrong queried wrongly (checked against $source_desc)"
  exit 1
fi
echo "dashboard_check: all $n metric families $dashboard queries are exported by sluiced (checked against $source_desc)"
