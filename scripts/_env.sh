# Sourced by scripts/test, demo, bench, docs and lock: make (or reuse) a local
# virtual environment with all six distributions installed editable. Only
# Python 3 with pip and venv is needed; nothing is installed outside the
# repository.
#
# Three kinds of environment (see scripts/README.md):
#   locked  the exact, hash-checked versions of requirements/lock/NAME.txt
#           (what CI runs; regenerate with scripts/lock)
#   latest  the newest releases that requirements/NAME.txt and the
#           distributions' own ranges admit (drift found on purpose)
#   lowest  the oldest versions the distributions' ranges admit
#           (scripts/lowest_constraints.py turns their floors into pins)
#
# EASYCORE_TORCH_INDEX=URL (or --torch-index URL on scripts/test and demo)
# installs torch from that index first, e.g. the CPU builds at
# https://download.pytorch.org/whl/cpu, for machines without the CPU wheel at
# hand: PyPI's torch of the same version is the CUDA build (several GB).
#
# --python VERSION|PATH (scripts/test) picks another interpreter: `3.13` is
# found as python3.13 on PATH or under pyenv's versions (see find_python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
# The scripts' own helpers (scripts/lowest_constraints.py needs 3.11's tomllib)
# run on this one, whichever interpreter --python gives the environment.
HOST_PY="$PY"
DISTRIBUTIONS=(easycore-config easycore-registry easycore-path easycore-parallel easycore-torch easycore)
EASYCORE_TORCH_INDEX="${EASYCORE_TORCH_INDEX:-}"

# distributions_for NAME: the distributions (with the extras the lock resolves)
# that environment NAME holds (tests/packaging/test_lock_files.py reads it too).
# The light environments (docs, demo, test-light) hold neither easycore-torch nor
# Ray: the docs build reads the sources and imports neither, and the light
# tutorials and test suites do not need them (test-light tests fsspec's handler).
distributions_for() {
  case "$1" in
    docs|demo)
      echo easycore-config easycore-registry easycore-path easycore-parallel easycore ;;
    test-light)
      echo easycore-config easycore-registry "easycore-path[fsspec]" easycore-parallel easycore ;;
    *)
      echo easycore-config easycore-registry easycore-path "easycore-parallel[ray]" easycore-torch "easycore[all]" ;;
  esac
}

# parse_env_options "$@": takes --latest, --lowest, --torch-index URL and
# --python VERSION|PATH off the front of the arguments; sets ENV_MODE,
# EASYCORE_TORCH_INDEX and ENV_PYTHON and leaves the rest in ENV_ARGS.
parse_env_options() {
  ENV_MODE=locked
  ENV_PYTHON=
  ENV_ARGS=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --latest) ENV_MODE=latest ;;
      --lowest) ENV_MODE=lowest ;;
      --torch-index) [[ $# -ge 2 ]] || { echo "--torch-index needs a URL" >&2; exit 2; }
                     EASYCORE_TORCH_INDEX="$2"; shift ;;
      --torch-index=*) EASYCORE_TORCH_INDEX="${1#--torch-index=}" ;;
      --python) [[ $# -ge 2 ]] || { echo "--python needs a version (3.13) or a path" >&2; exit 2; }
                ENV_PYTHON="$2"; shift ;;
      --python=*) ENV_PYTHON="${1#--python=}" ;;
      *) ENV_ARGS=("$@"); break ;;
    esac
    shift
  done
}

# find_python VERSION|PATH: print the interpreter for --python. A path is taken
# as it is; a version X.Y is python X.Y on PATH, else the newest X.Y.* under
# pyenv's versions ($PYENV_ROOT, or ~/.pyenv), whichever runs and is X.Y (a pyenv
# shim on PATH fails for a version the shell has not selected). Fails, naming
# what it tried, when none is.
find_python() {
  local want="$1" candidate candidates=() version
  if [[ "$want" == */* ]]; then
    if version="$(python_version "$want" 2>/dev/null)"; then
      echo "$want"
      return 0
    fi
    echo "error: --python $want does not run as a Python interpreter" >&2
    return 1
  fi
  if [[ ! "$want" =~ ^3\.[0-9]+$ ]]; then
    echo "error: --python takes a version such as 3.13 or a path to an interpreter, not '$want'" >&2
    return 1
  fi
  candidate="$(command -v "python$want" || true)"
  [[ -n "$candidate" ]] && candidates+=("$candidate")
  candidate="$(printf '%s\n' "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want".*/bin/python | sort -V | tail -1)"
  [[ -x "$candidate" ]] && candidates+=("$candidate")
  for candidate in ${candidates[@]+"${candidates[@]}"}; do
    if [[ "$(python_version "$candidate" 2>/dev/null)" == "$want" ]]; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: no Python $want: neither python$want on PATH nor" \
       "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want.*/bin/python runs" >&2
  return 1
}

# python_version PY: its X.Y.
python_version() {
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}

# venv_for MODE BASE: the environment's folder for a mode (.venv, .venv-latest, ...).
venv_for() {
  if [[ "$1" == locked ]]; then echo "$2"; else echo "$2-$1"; fi
}

# ensure_env VENV NAME [MODE]: NAME is docs, test or bench (requirements/NAME.txt
# and requirements/lock/NAME.txt). The environment is rebuilt from scratch only
# when a requirement or lock file, a pyproject, these scripts or the torch index
# changed since the last run.
# env_stamp MODE: what an environment of that mode is made from (the interpreter,
# requirement and lock files, pyprojects, these scripts), as one hash.
env_stamp() {
  (cd "$ROOT" && echo "$1 $EASYCORE_TORCH_INDEX" && "$PY" -c 'import sys; print(sys.version)' &&
   cat requirements/*.txt requirements/lock/*.txt packages/*/pyproject.toml \
       scripts/_env.sh scripts/lowest_constraints.py) | sha256sum | cut -d' ' -f1
}

ensure_env() {
  local venv="$ROOT/$1" name="$2" mode="${3:-locked}"
  local stamp="$venv/.easycore-stamp" want rel="$1" d
  local lock="$ROOT/requirements/lock/$name.txt" pip editable=() dists
  want="$(env_stamp "$mode")"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  read -ra dists <<< "$(distributions_for "$name")"
  for d in "${dists[@]}"; do editable+=(-e "$ROOT/packages/$d"); done
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  echo "==> setting up $rel: $mode dependencies for '$name' (first run or changed requirements; a few minutes)"
  echo "==> [1/4] creating a fresh virtual environment in $rel with $PY"
  "$PY" -m venv --clear "$venv"
  if [[ " ${dists[*]} " != *" easycore-torch "* ]]; then
    echo "==> [2/4] no torch in this environment"
  elif [[ -n "$EASYCORE_TORCH_INDEX" ]]; then
    local torch_pin
    if [[ "$mode" == locked ]]; then
      torch_pin="$(grep -E '^torch==' "$lock" | cut -d' ' -f1)"
    else
      torch_pin="$(grep -E '^torch[=<>~! ]' "$ROOT/requirements/test.txt" | head -1)"
    fi
    echo "==> [2/4] installing ${torch_pin:-torch} from $EASYCORE_TORCH_INDEX"
    "${pip[@]}" install --no-deps --index-url "$EASYCORE_TORCH_INDEX" "${torch_pin:-torch}"
  else
    echo "==> [2/4] torch comes with the rest (set EASYCORE_TORCH_INDEX to take it from another index)"
  fi
  case "$mode" in
    locked)
      echo "==> [3/4] installing the pinned, hash-checked versions of requirements/lock/$name.txt"
      if ! "${pip[@]}" install --require-hashes --no-deps -r "$lock"; then
        echo "error: installing requirements/lock/$name.txt with $PY failed." >&2
        if grep -q '^torch==' "$lock"; then
          echo "       If pip found no torch==2.13.0+cpu, this machine has no CPU build of torch" >&2
          echo "       at hand: rerun with EASYCORE_TORCH_INDEX=https://download.pytorch.org/whl/cpu" >&2
          echo "       (see docs/installation.md)." >&2
        fi
        exit 1
      fi
      echo "==> [4/4] installing the easycore distributions (editable, no new dependencies)"
      # built with the lock's hatchling and editables, so nothing unpinned is fetched
      "${pip[@]}" install --no-deps --no-build-isolation "${editable[@]}"
      ;;
    latest)
      echo "==> [3/4] resolving requirements/$name.txt and the distributions' ranges to their newest releases"
      echo "==> [4/4] installing them with the easycore distributions (editable)"
      "${pip[@]}" install --upgrade --upgrade-strategy eager "${editable[@]}" -r "$ROOT/requirements/$name.txt"
      ;;
    lowest)
      local constraints="$venv/lowest-constraints.txt"
      echo "==> [3/4] pinning each dependency of the distributions to its floor (scripts/lowest_constraints.py):"
      "$HOST_PY" "$ROOT/scripts/lowest_constraints.py" > "$constraints"
      sed 's/^/      /' "$constraints"
      echo "==> [4/4] installing them with requirements/$name.txt and the easycore distributions (editable)"
      # lowest-hints.txt: constraints on test tools that the floors force, given
      # to pip so it need not backtrack through hundreds of releases to find them
      "${pip[@]}" install "${editable[@]}" -r "$ROOT/requirements/$name.txt" -c "$constraints" \
        -c "$ROOT/requirements/lowest-hints.txt"
      ;;
    *) echo "unknown environment mode: $mode" >&2; exit 2 ;;
  esac
  echo "==> checking that the installed versions fit together (pip check)"
  if ! "${pip[@]}" check; then
    if [[ "$mode" == locked ]]; then
      echo "error: requirements/lock/$name.txt no longer satisfies the requirements" >&2
      echo "       (a pyproject or requirements/$name.txt changed): run scripts/lock and commit it." >&2
    fi
    exit 1
  fi
  echo "$want" > "$stamp"
  echo "==> $rel is ready"
}
