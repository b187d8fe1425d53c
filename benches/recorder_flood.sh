#!/usr/bin/env bash
# What recording costs a flood now that the PTY waits for a recorder that falls behind (issue
# 38 item 6): the seconds `seq 1 $LINES` takes inside a session with one viewer (`ptyhub
# attach` on a terminal of script(1)), recording on and off alternately, on a calm machine and
# beside two spinning shells; and whether the recording kept every line.
#
# Run: cargo build --release --bin ptyhub && benches/recorder_flood.sh
# (LINES=2000000 RUNS=3 PTYHUB_BIN=target/release/ptyhub by default). Prints one line per run.
set -euo pipefail
BIN=$(realpath "${PTYHUB_BIN:-target/release/ptyhub}")
LINES=${LINES:-2000000}
RUNS=${RUNS:-3}
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# One flood: $1 on|off, $2 calm|busy, $3 run number. Prints the program's own time for it.
flood() {
    local dir=$tmp/$1-$2-$3 addr id elapsed kept
    mkdir -p "$dir/rec"
    printf '[recording]\nenabled = %s\ndir = "%s"\n' \
        "$([ "$1" = on ] && echo true || echo false)" "$dir/rec" >"$dir/cfg.toml"
    # Each in a process group of its own: signals meant for them reach nothing else here.
    setsid "$BIN" --listen 127.0.0.1:0 --config "$dir/cfg.toml" --no-auth >"$dir/out" 2>"$dir/log" &
    local daemon=$!
    pids+=("$daemon")
    until grep -qs 'listening on' "$dir/out"; do sleep 0.05; done
    addr=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$dir/out" | head -1)
    # The program waits for the viewer's first line of input (sent once it is attached).
    id=$(curl -sf "$addr/api/sessions" -H 'content-type: application/json' -d "{\"cmd\":[\"sh\",\"-c\",
        \"read go; s=\$(date +%s%N); seq 1 $LINES; e=\$(date +%s%N); echo ELAPSED \$(( (e-s)/1000000 ))ms; sleep 30\"]}" |
        jq -r .id)
    mkfifo "$dir/keys"
    setsid script -qfc "$BIN attach --server $addr $id" /dev/null <"$dir/keys" >/dev/null 2>&1 &
    local viewer=$!
    pids+=("$viewer")
    exec 3>"$dir/keys"
    sleep 1
    printf 'go\r' >&3
    until elapsed=$(curl -sf "$addr/api/sessions/$id/scrollback" | jq -r .scrollback | base64 -d |
        grep -ao 'ELAPSED [0-9]*ms'); do sleep 0.2; done
    kept=-
    if [ "$1" = on ]; then
        sleep 0.5 # the recorder's last batch (it writes every 100 ms)
        kept=$(jq -j 'select(type == "array" and .[1] == "o") | .[2]' "$dir/rec/$id.cast" |
            tr -d '\r' | grep -cxE '[0-9]+' || true)
    fi
    echo "recording $1, $2, run $3: ${elapsed#ELAPSED }, lines recorded $kept of $LINES"
    exec 3>&-
    kill "$viewer" "$daemon" 2>/dev/null || true
    wait "$viewer" "$daemon" 2>/dev/null || true
}

for mode in calm busy; do
    spinners=()
    if [ "$mode" = busy ]; then
        for _ in 1 2; do
            sh -c 'ulimit -t 600; while :; do :; done' &
            spinners+=($!)
            pids+=($!)
        done
    fi
    for r in $(seq "$RUNS"); do
        # Alternating which goes first, so a machine that slows down favours neither.
        if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
        for rec in $order; do flood "$rec" "$mode" "$r"; done
    done
    for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
done
