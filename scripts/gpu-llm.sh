#!/usr/bin/env bash
# Issue 44 on a GPU, in one device call: a causal LM at bf16 generating on the GPU, composed from
# its measured operators against its own generate() runs (docs/llm.md, "On a GPU").
#
#   bash scripts/gpu-llm.sh [WHEELS] OUT [--budget-s S] [--dry-run]
#
#   WHEELS       the folder of scripts/gpu-wheels.sh; left out, the dependencies must already be
#                importable by $PYTHON (default python3)
#   --budget-s   the whole run's wall-clock budget, s (default 540: 9 minutes)
#   --dry-run    a 2-layer Llama on the fake device, fp32: the script checked anywhere
#
# Steps, each under its own timeout inside the budget: `opdb peaks` at bf16 (the decode bound's
# bandwidth), `opdb llm harvest` of Llama-3.2-1B's config (random weights, tied head; $LLM_CONFIG
# overrides it) at batch 1 and 8, prompt 128, 64 new tokens, then `opdb llm measure` batch by
# batch while at least $MIN_MEASURE_S (default 330: one batch with energy) is left, and `opdb llm
# estimate` and `opdb llm compare`. With energy, each configuration takes about 2 s of device time
# in its aligned windows: one batch of a 103-configuration model needs 4–5 minutes.
#
# OUT holds, flat: session.log (each step's exit code and time), peaks.log, harvest.log,
# measure-b1.log, measure-b8.log, estimate.txt, estimate.json, compare.txt and llm-gpu.sqlite.gz
# (the measured database). Copy OUT to docs/gpu-runs/<gpu>-<date>-llm/ and commit it at once.
# Exit code: 0 every step ran and passed, 1 a step failed or timed out, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
PYTHON="${PYTHON:-python3}"
positional=() budget=540 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --budget-s) budget="$2"; shift 2 ;;
    -h|--help) sed -n '5,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-llm.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
case ${#positional[@]} in
  1) wheels="" out="${positional[0]}" ;;
  2) wheels="$(realpath "${positional[0]}")" out="${positional[1]}" ;;
  *) echo "usage: bash scripts/gpu-llm.sh [WHEELS] OUT [--budget-s S] [--dry-run]" >&2; exit 2 ;;
esac
mkdir -p "$out"
out="$(realpath "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log() { echo "[gpu-llm $((SECONDS - start)) s] $*" | tee -a "$out/session.log" >&2; }
left() { echo $((budget - (SECONDS - start))); }

# shellcheck source=scripts/gpu-site.sh
source scripts/gpu-site.sh
gpu_site gpu-llm.sh "$wheels" "$work"  # sets site, PYTHONPATH; the same torch
export PYTHONUNBUFFERED=1 COLUMNS=240
db="sqlite:///$work/llm-gpu.sqlite"
opdb=("$PYTHON" -m operator_db)
if [ "$dry" = 1 ]; then
  device=fake dtype=float32 min_measure="${MIN_MEASURE_S:-5}"
  config="${LLM_CONFIG:-num_hidden_layers=2 hidden_size=64 intermediate_size=128 num_attention_heads=4 num_key_value_heads=2 vocab_size=256 tie_word_embeddings=true max_position_embeddings=256}"
  prompt=16 new=4 measure=(--budget 0 --tight-budget 0)
  # The fake device in milliseconds: the tests' settings (config.FAST_FAKE_MEASURE), one home.
  eval "$("$PYTHON" -c 'from operator_db.config import FAST_FAKE_MEASURE as F
print("\n".join(f"export {k}={v}" for k, v in F.items()))')"
else
  device=nvidia dtype=bfloat16 min_measure="${MIN_MEASURE_S:-330}"
  config="${LLM_CONFIG:-num_hidden_layers=16 hidden_size=2048 intermediate_size=8192 num_attention_heads=32 num_key_value_heads=8 head_dim=64 vocab_size=128256 tie_word_embeddings=true max_position_embeddings=131072}"
  prompt=128 new=64 measure=(--budget 15 --tight-budget 5)
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv \
    >> "$out/session.log" 2>&1
fi
failed=0
step() {  # step NAME SECONDS COMMAND...: run under a timeout, output to OUT/NAME.log
  local name="$1" seconds="$2"
  shift 2
  timeout "$seconds" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc (limit $seconds s)"
  [ "$rc" = 0 ] || failed=1
}
# shellcheck disable=SC2086  # the config is a list of KEY=VALUE words
step peaks 60 "${opdb[@]}" peaks --device "$device" --dtypes "$dtype" --db "$db"
# shellcheck disable=SC2086
step harvest 120 "${opdb[@]}" llm harvest transformers:LlamaForCausalLM $config --dtype "$dtype" \
  -b 1,8 -p "$prompt" -n "$new" --name llama-3.2-1b --db "$db"
for batch in 1 8; do
  if [ "$(left)" -lt $((min_measure + 30)) ]; then
    log "measure-b$batch: skipped, $(left) s left (needs $min_measure s and 30 s for the rest)"
    continue
  fi
  step "measure-b$batch" $(($(left) - 30)) "${opdb[@]}" llm measure llama-3.2-1b --device "$device" \
    -b "$batch" "${measure[@]}" --db "$db"
done
"${opdb[@]}" llm estimate llama-3.2-1b --db "$db" > "$out/estimate.txt" 2>&1
"${opdb[@]}" llm estimate llama-3.2-1b --json --db "$db" > "$out/estimate.json" 2>&1
"${opdb[@]}" llm compare llama-3.2-1b --db "$db" > "$out/compare.txt" 2>&1
cat "$out/estimate.txt" >> "$out/session.log"
gzip -c "$work/llm-gpu.sqlite" > "$out/llm-gpu.sqlite.gz"
log "done in $((SECONDS - start)) s"
exit "$failed"
