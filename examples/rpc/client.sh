#!/usr/bin/env bash
# A corral RPC client in bash: JSON is read with jq when it is installed, else Python.
#
#   examples/rpc/client.sh [SCRIPT.jsonl] [PROMPT]
#
# Spawns `corral rpc` as a coprocess (the scripted provider with SCRIPT, the offline
# model without), says hello (with $CORRAL_RPC_TOKEN when set), sends one prompt,
# prints the events until `done`, then closes corral's stdin and waits for its exit.
# $CORRAL overrides the command that starts corral (default: corral).
set -euo pipefail

script=${1:-}
prompt=${2:-Summarise the README.}

if command -v jq >/dev/null 2>&1; then
  # get FIELD < json: the field as raw text ("" when missing).
  get() { jq -r --arg f "$1" 'if has($f) then .[$f] else "" end | if type == "string" then . else tojson end'; }
  # encode TEXT: TEXT as a JSON string.
  encode() { jq -Rn --arg s "$1" '$s'; }
else
  get() {
    python3 -c 'import json, sys
v = json.load(sys.stdin).get(sys.argv[1], "")
print(v if isinstance(v, str) else json.dumps(v))' "$1"
  }
  encode() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
fi

args=(rpc)
if [ -n "$script" ]; then args+=(--provider scripted --script "$script"); fi
# shellcheck disable=SC2086  # $CORRAL may hold a command with arguments
coproc RPC { exec ${CORRAL:-corral} "${args[@]}"; }
to_corral=${RPC[1]}
from_corral=${RPC[0]}

if [ -n "${CORRAL_RPC_TOKEN:-}" ]; then
  printf '{"id":"hello","type":"hello","token":%s}\n' "$(encode "$CORRAL_RPC_TOKEN")" >&"$to_corral"
else
  printf '{"id":"hello","type":"hello"}\n' >&"$to_corral"
fi
printf '{"id":"p1","type":"prompt","message":%s}\n' "$(encode "$prompt")" >&"$to_corral"

while IFS= read -r line <&"$from_corral"; do
  type=$(get type <<<"$line")
  case "$type" in
    response)
      if [ "$(get success <<<"$line")" != "true" ]; then
        echo "error: $(get error <<<"$line")" >&2
        exit 1
      fi
      if [ "$(get id <<<"$line")" = "hello" ]; then
        data=$(get data <<<"$line")
        echo "connected: corral $(get version <<<"$data"), $(get provider <<<"$data")/$(get model <<<"$data")"
      fi
      ;;
    text_delta) printf '%s' "$(get delta <<<"$line")" ;;
    assistant_message) echo ;;
    tool_call) echo "  -> $(get name <<<"$line") $(get args <<<"$line")" ;;
    tool_result) echo "  <- is_error=$(get is_error <<<"$line") $(get content <<<"$line")" ;;
    turn_end) echo "[turn_end $(get stop <<<"$line")]" ;;
    done) echo "[done]"; break ;;
    turn_start | user_message | assistant_start) ;;
    *) echo "[$type]" ;;
  esac
done

# End of input: corral finishes what is queued, stops its extensions and exits 0.
exec {to_corral}>&-
status=0
wait "$RPC_PID" || status=$?
echo "corral exited with $status"
exit "$status"
