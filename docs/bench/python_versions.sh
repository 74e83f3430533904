#!/usr/bin/env bash
# Installs requirements.txt into a fresh virtualenv of each Python given, from binary wheels only
# (--only-binary=:all:: no compiler needed), and runs the tests there in a checkout of HEAD; each
# Python becomes a row of docs/results/python_versions.csv (the versions installed, pytest's
# summary). RAY=1 also installs Ray, as .ci/run does, so that the Ray tests run, not skip.
#   bash docs/bench/python_versions.sh ~/.pyenv/versions/3.11.7/bin/python python3.13 ...
set -u
[ $# -ge 1 ] || { echo "usage: bash docs/bench/python_versions.sh PYTHON [PYTHON ...]" >&2; exit 2; }
pythons=()
for py in "$@"; do  # resolved before the cd below, so that a relative path means what the user meant
  found=$(command -v "$py") || { echo "$py: no such interpreter" >&2; exit 2; }
  case $found in /*) ;; *) found="$PWD/$found" ;; esac
  pythons+=("$found")
done
cd "$(dirname "$0")/../.."
row() {  # PYTHON PACKAGES PYTEST-SUMMARY -> a row of docs/results/python_versions.csv
  "$1" -c 'import platform, sys; sys.path.insert(0, "docs/bench"); from results_csv import append, machine
append("python_versions.csv", [dict(python=platform.python_version(), packages=sys.argv[1], tests=sys.argv[2],
       ray=sys.argv[3], **machine())], "python packages tests ray processor simd cores date commit".split())' \
    "$2" "$3" "$ray"
}
status=0
for py in "${pythons[@]}"; do
  dir=$(mktemp -d)
  ray=0
  echo "== $("$py" --version 2>&1) ($py)"
  if ! "$py" -m venv "$dir/venv"; then echo "   venv failed"; status=1; rm -rf "$dir"; continue; fi
  "$dir/venv/bin/python" -m pip install --quiet --upgrade pip > /dev/null 2>&1
  if ! "$dir/venv/bin/python" -m pip install --quiet --only-binary=:all: -r requirements.txt > "$dir/pip.log" 2>&1; then
    echo "   install failed (last lines of pip's output):"; tail -n 5 "$dir/pip.log" | sed 's/^/   /'
    row "$py" "install failed" ""; status=1; rm -rf "$dir"; continue
  fi
  if [ "${RAY:-0}" = 1 ]; then
    if "$dir/venv/bin/python" -m pip install --quiet --only-binary=:all: "ray>=2.40" > /dev/null 2>&1; then ray=1
    else echo "   Ray did not install"; fi
  fi
  got=$("$dir/venv/bin/python" -c "import numpy, gymnasium, mujoco, matplotlib, Box2D
print('numpy', numpy.__version__, '| gymnasium', gymnasium.__version__, '| mujoco', mujoco.__version__,
      '| matplotlib', matplotlib.__version__, '| Box2D', Box2D.__version__)")
  echo "   $got"
  # The tests run in a checkout of HEAD of their own: the rows this script appends to docs/results/
  # would otherwise change what the docs' tables are checked against.
  git worktree add --quiet --detach "$dir/src" HEAD
  (cd "$dir/src" && "$dir/venv/bin/python" -m pytest -q -rfE -p no:cacheprovider) > "$dir/pytest.log" 2>&1
  [ $? = 0 ] || status=1
  git worktree remove --force "$dir/src"
  grep -E '^(FAILED|ERROR) ' "$dir/pytest.log" | sed 's/^/   /'  # which tests, if any
  tail -n 1 "$dir/pytest.log" | sed 's/^/   /'
  row "$py" "$got" "$(tail -n 1 "$dir/pytest.log")"
  rm -rf "$dir"
done
exit $status
