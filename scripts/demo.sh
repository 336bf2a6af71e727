#!/usr/bin/env bash
# The demo behind `make run`: makes a small text dataset on disk (one labelled
# sentence per line), indexes it and shows its first lines with the `ferry`
# command, then trains a small PyTorch model on it fed by ferry.DataLoader,
# stopping halfway and resuming from the saved state.
set -euo pipefail
ferry=${1:-build/ferry}
demo=${2:-build/demo}
python=${3:-/usr/bin/python3}
mkdir -p "$demo"
text="$demo/mentions.txt"
if [ ! -s "$text" ]; then
  echo "== making a demo dataset: $text (300,000 lines: label, tab, sentence)"
  /usr/bin/python3 - "$text" <<'PY'
import random, sys
random.seed(7)
words = ("the a loader feeds batches to an accelerator that waits for input while "
         "workers decode samples into pooled memory in a reproducible order").split()
with open(sys.argv[1], "w") as f:
    for i in range(300000):
        s = " ".join(random.choice(words) for _ in range(random.randint(4, 40)))
        f.write("%d\t%s\n" % ("accelerator" in s.split(), s))
PY
fi
echo "== ferry $("$ferry" version | cut -d' ' -f2): indexing"
"$ferry" index "$text"
echo "== the first lines (label 1: the sentence mentions an accelerator)"
"$ferry" head "lines:$text" -n 3
"$python" "$(dirname "$0")/demo_train.py" "$text" "$demo/state.pt"
