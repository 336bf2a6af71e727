#!/usr/bin/env bash
# Makes a folder that runs bench/gpu_check.py on a machine with a GPU and
# nothing built there: the Python package with its one .abi3.so (built here, for
# CPython 3.11 and later), the shared libraries it links that such a machine may
# lack, the check and its image generator, and run.sh.
#   bench/gpu_bundle.sh [OUT]        (default build/gpu)
# Then, on the GPU machine, from the folder's parent:  OUT/run.sh [gpu_check.py args]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu}
py=${PYTHON:-/usr/bin/python3}
rm -rf "$out"
mkdir -p "$out/ferry" "$out/lib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S . -B "$tmp/b" -DCMAKE_BUILD_TYPE=Release -DFERRY_PYTHON=ON -DFERRY_BUILD_TESTS=OFF \
  -DFERRY_BUILD_CLI=OFF -DPython3_EXECUTABLE="$py" >/dev/null
cmake --build "$tmp/b" --target ferry_python -j"$(nproc)" >/dev/null
cp "$tmp/b/_ferry.abi3.so" python/ferry/*.py python/ferry/py.typed "$out/ferry/"
# the libraries beyond the C library itself: a machine with a GPU image rarely
# has LMDB, libspng or ISA-L
for lib in $(ldd "$out/ferry/_ferry.abi3.so" | awk '/=> \// {print $3}'); do
  case $(basename "$lib") in
  libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|ld-linux*) ;;
  *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cp bench/gpu_check.py bench/gen_images.py "$out/"
cat > "$out/run.sh" <<'EOS'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec python3 "$here/gpu_check.py" "$@"
EOS
chmod +x "$out/run.sh"
du -sh "$out" | cut -f1 | sed "s|^|$out: |"
