# Sourced by scripts/test, demo, bench and docs: make (or reuse) a local virtual
# environment with all six distributions installed editable plus the given
# requirement files. Only Python 3 with pip and venv is needed; nothing is
# installed outside the repository.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DISTRIBUTIONS=(easycore-config easycore-registry easycore-path easycore-parallel easycore-torch easycore)

# ensure_env VENV REQUIREMENTS... : the environment is rebuilt only when a
# requirement file, a pyproject or this script changed since the last run.
ensure_env() {
  local venv="$ROOT/$1"; shift
  local stamp="$venv/.easycore-stamp" want args=() r d
  want="$(cd "$ROOT" && cat "$@" requirements/*.txt packages/*/pyproject.toml scripts/_env.sh | sha256sum | cut -d' ' -f1)"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  echo "==> setting up ${venv#"$ROOT"/} (first run or changed requirements; takes a minute or two)"
  [[ -x "$venv/bin/python" ]] || "$PY" -m venv "$venv"
  for d in "${DISTRIBUTIONS[@]}"; do args+=(-e "$ROOT/packages/$d"); done
  for r in "$@"; do args+=(-r "$ROOT/$r"); done
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${args[@]}"
  echo "$want" > "$stamp"
}
