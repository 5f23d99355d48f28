#!/usr/bin/env bash
# The package as users install it: build the wheel once, check what it holds, install it into
# clean virtualenvs (bare, then once per extra) and run .ci/wheel_smoke.py in each. Every
# dependency is fetched once into a wheelhouse (from pip's cache when it can), so each venv
# installs without asking the index again.
# Needs the test stack (SEGCAT_TEST_BOOTSTRAP_SERVERS / SEGCAT_TEST_REDIS_URL, else the local
# stack's SEGCAT_BOOTSTRAP_SERVERS / SEGCAT_REDIS_URL) and a package index or pip's cache.
# ./dev test runs it under CI=true; ./dev smoke alone. PYTHON picks the interpreter (>= 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3}
work=$root/build/wheel-smoke
extras=("" spark server materializer stack all)
started=$SECONDS
log() { printf '\033[1;34m[wheel-smoke]\033[0m %s\n' "$*" >&2; }

# setuptools builds through build/lib and never empties it: a module deleted or a package
# dropped from pyproject would still ship from there
rm -rf "$work" build/lib build/bdist.*
mkdir -p "$work/dist"
"$python" -m pip wheel --no-deps --quiet --wheel-dir "$work/dist" .
wheel=$(echo "$work"/dist/segcat-*.whl)
log "built $(basename "$wheel") in $((SECONDS - started))s"

# every module of the folders pyproject maps, its data and the licence are in the wheel
"$python" - "$wheel" <<'PY'
import sys, tomllib, zipfile
from pathlib import Path

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
config = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]

def folder(package):
    for prefix, where in config["package-dir"].items():
        if package == prefix or package.startswith(prefix + "."):
            return Path(where, *package[len(prefix) + 1 :].split(".")) if package != prefix else Path(where)
    return Path(*package.split("."))

want = {"segcat/py.typed"}
for package in config["packages"]:
    where = folder(package)
    files = list(where.glob("*.py"))
    files += [p for pattern in config["package-data"].get(package, []) for p in where.glob(pattern)]
    want |= {f"{package.replace('.', '/')}/{p.relative_to(where)}" for p in files}
for package, where in config["package-dir"].items():  # every module, listed package or not
    modules = [p for p in Path(where).rglob("*.py") if "__pycache__" not in p.parts]
    want |= {f"{package.replace('.', '/')}/{p.relative_to(where)}" for p in modules}
missing = sorted(want - names)
assert not missing, f"missing from the wheel: {missing}"
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "no LICENSE in the wheel"
print(f"the wheel holds the {len(want)} files of the package")
PY

"$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" "$wheel[all]"
log "dependencies of segcat[all] in the wheelhouse after $((SECONDS - started))s"

for extra in "${extras[@]}"; do
  venv="$work/venv-${extra:-bare}"
  begun=$SECONDS
  "$python" -m venv --without-pip "$venv"
  "$python" -m pip --python "$venv/bin/python" install --quiet --no-compile --disable-pip-version-check \
    --no-index --find-links "$work/wheels" "$wheel${extra:+[$extra]}"
  installed=$((SECONDS - begun))
  # -I: no PYTHONPATH, no script folder on the path: only what the wheel installed
  (cd "$work" && "$venv/bin/python" -I "$root/.ci/wheel_smoke.py" "$extra")
  log "${extra:-bare}: install ${installed}s, smoke $((SECONDS - begun - installed))s"
  rm -rf "$venv"
done
rm -rf "$work/wheels"
log "the wheel passed bare and with every extra in $((SECONDS - started))s"
