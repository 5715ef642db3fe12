#!/usr/bin/env bash
# Runs every benchmark in sequence inside the Soft-RoCE guest (started by
# scripts/bench through scripts/rxe-vm). First ROUNDS rounds (3; --quick:
# 1; ZCRPC_BENCH_ROUNDS overrides) that alternate perftest and zcrpc, so
# that each ratio can be taken within a round and the rounds' spread
# shows the guest's bimodal noise: per round ib_send_lat and the zcrpc
# transport and RPC latency, the 16-byte message rate (ib_send_bw -s 16
# -t 64 beside zcrpc_bench_transport -m rate and the RPC call rate with
# 64 in flight), the streams (zcrpc_bench_stream: 16 B server-streaming on
# 1 and 16 streams of one connection, 16 with one paused, client-streaming
# of the largest stream message), ib_write_bw and the zcrpc bandwidths (in round 1 only:
# ib_write_lat, ib_send_bw and, not in --quick, the 4-connection call
# rate). Then rstream, ucx_perftest, the gRPC peer (TCP across the veth
# pair), a callgrind run of the RPC client and, with --scale, the scale
# part (zcrpc_bench_scale: N = 1 ... 1024 channels into one server process).
# Raw outputs go to OUTDIR/raw (one file per run, plus runs.tsv listing
# each run's command and exit status); progress goes to stderr. Never
# fails on a reference that does not run: its command and error are kept
# for the report.
#
# Usage: bench/run-in-guest.sh BUILD_BENCH_DIR OUTDIR [--quick] [--scale|--scale-only]
set -uo pipefail
bin=$1 out=$2
shift 2
quick= scale= only_scale=
for a in "$@"; do
  case $a in
    --quick) quick=--quick ;;
    --scale) scale=1 ;;
    --scale-only) scale=1 only_scale=1 ;;
    *) echo "run-in-guest: unknown option $a" >&2; exit 2 ;;
  esac
done
raw=$out/raw
mkdir -p "$raw"
: >"$raw/runs.tsv"
A0=${ZCRPC_RXE_ADDR0:?not in the rxe guest}
A1=${ZCRPC_RXE_ADDR1:-192.0.2.2}
D0=${ZCRPC_RXE_DEV0:-rxe0}
# The gRPC peer: built by scripts/bench when gRPC was found; its status
# line ("built: ..." or "not built: why") is in OUTDIR/grpc-status.txt.
grpc_status=$(cat "$out/grpc-status.txt" 2>/dev/null || echo "not built: no grpc-status.txt")
grpc_on=
case $grpc_status in built:*) [ -x "$bin/zcrpc_bench_grpc" ] && grpc_on=1 ;; esac

lat_sizes="16 256 4096"
bw_sizes="4096 65536 262144 1048576 4194304 8388608"
z_bw_sizes="4K,64K,256K,1M,4M,8M,16M,64M"
if [ "$quick" = --quick ]; then
  lat_n=200 lat_w=20 bw_total=$((8 << 20)) tput_secs=1 cg_calls=50 rs_opts="-S 4096 -C 100"
  bw_sizes="4096 65536 262144 1048576" z_bw_sizes="4K,64K,1M,16M" rounds=${ZCRPC_BENCH_ROUNDS:-1}
  rate_n=2000
  # gRPC: one tiny 16-byte latency run only (its calls take milliseconds
  # in the guest and its start seconds; the step must stay within 20 s)
  g_lat_sizes=16 g_lat_n=30 g_lat_w=5 g_tput_conns="" g_bw_sizes=""
  # the scale part (only with --scale): window 64, N = 1 and 64, briefly
  scale_runs=("window64 -W 64 -C 256 -M 0 -N 1,64 -T 1")
else
  lat_n=3000 lat_w=300 bw_total=$((64 << 20)) tput_secs=5 cg_calls=1000 rs_opts=""
  rounds=${ZCRPC_BENCH_ROUNDS:-3} rate_n=100000
  g_lat_sizes=16,256,4K g_lat_n=$lat_n g_lat_w=$lat_w g_tput_conns="1 4" g_bw_sizes=$z_bw_sizes
  # The scale part (--scale), one zcrpc_bench_scale run per line: LABEL
  # ARGS. "defaults": the library's window (1040), call table and pool,
  # channels opened one at a time (-b 1) so the limit shows at its own N
  # (one client process: its own pool runs out; "defaults-2procs": two
  # client processes, so the server's pool is the one short);
  # "window64": window 64 and a 256-entry call table (public options, as
  # in issue 13's measurement); "handler200us": the same with a handler
  # spending 200 us of CPU per call, 64 channels; "window64-2procs": two
  # client processes, up to the server's limit beyond 1,024. -M 0 lifts
  # the per-source connection limit (all clients share one address).
  # "workersW-*": the server on W workers (-w, one thread each), 64
  # channels, the 200 us handler and the echo beside it, every process
  # sleeping in progress when idle (-i) so the 2 vCPUs go to the handlers
  # and rxe (issue 13: goal >= 1.6x calls/s with 2 workers).
  scale_runs=("defaults -N 1,64 -b 1 -T 3"
    "defaults-2procs -N 64 -b 1 -P 2 -T 3"
    "window64 -W 64 -C 256 -M 0 -N 1,64,256,1024 -T 5"
    "handler200us -W 64 -C 256 -M 0 -u 200 -N 64 -T 5"
    "workers1-handler200us -W 64 -C 256 -M 0 -u 200 -N 64 -T 5 -i -w 1"
    "workers2-handler200us -W 64 -C 256 -M 0 -u 200 -N 64 -T 5 -i -w 2"
    "workers1-echo -W 64 -C 256 -M 0 -N 64 -T 5 -i -w 1"
    "workers2-echo -W 64 -C 256 -M 0 -N 64 -T 5 -i -w 2"
    "window64-2procs -W 64 -C 256 -M 0 -P 2 -N 1024,1100 -T 5")
fi
lat_reps=$rounds
nbw=$(echo $bw_sizes | wc -w)
ngrpc=1
[ -z "$grpc_on" ] || ngrpc=$(( lat_reps + $(echo $g_tput_conns | wc -w) + $(echo $g_bw_sizes | wc -w | sed 's/[1-9][0-9]*/1/') ))
nscale=0
[ -z "$scale" ] || nscale=${#scale_runs[@]}
# per round: 3 ib_send_lat, 2 zcrpc latency, ib_send_bw 16 B, 2 zcrpc
# rates, the zcrpc streams, nbw ib_write_bw, 2 zcrpc bandwidths; round 1
# also 3 ib_write_lat, nbw ib_send_bw, the 4-connection call rate
nsteps=$(( rounds * (3 + 2 + 1 + 2 + 1 + nbw + 2) + 3 + nbw + 1 + 1 + 1 + ngrpc + 1 + nscale + 1 ))
[ -z "$quick" ] || nsteps=$((nsteps - 1))
[ -z "$only_scale" ] || nsteps=$nscale
step=0
port=19100
t_start=$(date +%s)
progress() { # progress LABEL
  step=$((step + 1))
  printf '[bench %2d/%d %4ss] %s\n' "$step" "$nsteps" $(( $(date +%s) - t_start )) "$1" >&2
}
record() { # record ID RC FILE CMD...
  local id=$1 rc=$2 file=$3; shift 3
  printf '%s\t%s\t%s\t%s\n' "$id" "$rc" "$file" "$*" >>"$raw/runs.tsv"
  [ "$rc" -eq 0 ] || echo "    -> exit $rc; see $file" >&2
}

# pair ID TIMEOUT TOOL ARGS...: server `TOOL ARGS -p PORT` in the
# background, client `TOOL ARGS -p PORT A0`, fresh port each time.
pair() {
  local id=$1 to=$2; shift 2
  local try rc=1 f=$raw/$id.txt
  for try in 1 2 3; do
    port=$((port + 1))
    timeout $((to + 5)) "$@" -p $port >"$raw/$id.server.txt" 2>&1 &
    local spid=$!
    sleep 1.5
    timeout "$to" "$@" -p $port "$A0" >"$f" 2>&1
    rc=$?
    # A client that failed leaves its server waiting for a peer until its
    # own timeout (a segfaulted ib_write_lat client cost 130 s in CI).
    [ $rc -eq 0 ] || kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    # perftest reports inf when it could not calibrate the TSC under
    # emulation ("Correlation coefficient r^2 < 0.9"): run again; a failed
    # connect (seen once: RDMA_CM_EVENT_REJECTED) is retried too.
    if [ $rc -eq 0 ] && grep -Eq '^ *[0-9]+ +[0-9]+ +(inf|-nan)' "$f"; then
      echo "    (uncalibrated cycle counter, retry $try)" >&2
      rc=3
    fi
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || break   # a timeout is not retried
    [ $try -eq 3 ] || { echo "    (exit $rc, retry $try)" >&2; cp "$f" "$f.try$try"; }
  done
  record "$id" $rc "$f" "server: $* -p $port & client: $* -p $port $A0"
}

bulk_n() { # iterations moving about bw_total bytes, within 5..5000
  local n=$(( bw_total / $1 ))
  [ $n -ge 5 ] || n=5
  [ $n -le 5000 ] || n=5000
  echo $n
}

zrun() { # zrun ID TIMEOUT PROGRAM ARGS...
  local id=$1 to=$2; shift 2
  port=$((port + 1))
  timeout "$to" "$@" -a "$A0" -p $port >"$raw/$id.jsonl" 2>"$raw/$id.log"
  local rc=$?
  record "$id" $rc "$raw/$id.log" "$* -a $A0 -p $port"
}

# ---- rounds: perftest and zcrpc alternately ------------------------------------
# Round 1's ids are those of a single run (perftest-ib_send_lat-16, ...);
# later rounds add @ROUND (perftest-ib_send_lat-16@2, zcrpc-rpc-tput-1@2).
# zcrpc latency ids were numbered by run before rounds existed and still
# are (zcrpc-rpc-lat-2 is round 2). Under TCG a whole run sometimes lands
# in a mode where every round trip waits for the guest's 4 ms scheduler
# tick; the report takes, per figure, the median of the rounds and the
# median of the per-round ratios, and keeps every round in results.json.
one_round() { # one_round R
  local r=$1 at= s t n
  [ "$r" -eq 1 ] || at=@$r
  for s in $lat_sizes; do
    progress "round $r/$rounds: ib_send_lat -R -s $s -n $lat_n"
    pair "perftest-ib_send_lat-$s$at" 120 ib_send_lat -R -d "$D0" -F -s "$s" -n "$lat_n"
  done
  if [ "$r" -eq 1 ]; then
    for s in $lat_sizes; do
      progress "round $r/$rounds: ib_write_lat -R -s $s -n $lat_n"
      pair "perftest-ib_write_lat-$s" 120 ib_write_lat -R -d "$D0" -F -s "$s" -n "$lat_n"
    done
  fi
  progress "round $r/$rounds: zcrpc transport latency (16, 256, 4096 B; $lat_n round trips)"
  zrun "zcrpc-transport-lat-$r" 300 "$bin/zcrpc_bench_transport" -m lat -n "$lat_n" -w "$lat_w"
  progress "round $r/$rounds: zcrpc RPC latency (16, 256, 4096 B; $lat_n calls)"
  zrun "zcrpc-rpc-lat-$r" 300 "$bin/zcrpc_bench_rpc" -m lat -n "$lat_n" -w "$lat_w"
  progress "round $r/$rounds: ib_send_bw -R -s 16 -t 64 -n $rate_n (message rate)"
  pair "perftest-rate-ib_send_bw-16$at" 120 ib_send_bw -R -d "$D0" -F -s 16 -t 64 -n "$rate_n"
  progress "round $r/$rounds: zcrpc transport message rate (16 B, 64 in flight, $rate_n messages)"
  zrun "zcrpc-transport-rate-$r" 120 "$bin/zcrpc_bench_transport" -m rate -s 16 -d 64 -n "$rate_n" -w $((rate_n / 10))
  progress "round $r/$rounds: zcrpc RPC call rate (1 connection x 64 in flight, ${tput_secs}s)"
  zrun "zcrpc-rpc-tput-1$at" 120 "$bin/zcrpc_bench_rpc" -m tput -c 1 -d 64 -T "$tput_secs"
  progress "round $r/$rounds: zcrpc streams (16 B server-streaming on 1, 16, 16 with 1 paused; client-streaming; ${tput_secs}s each)"
  if [ -x "$bin/zcrpc_bench_stream" ]; then
    zrun "zcrpc-stream$at" 240 "$bin/zcrpc_bench_stream" -m all -T "$tput_secs"
  else  # a tree from before issue 15 (scripts/bench-compare's OLD_REV)
    echo "zcrpc_bench_stream: not built in $bin" >"$raw/zcrpc-stream$at.log"
    record "zcrpc-stream$at" 127 "$raw/zcrpc-stream$at.log" "$bin/zcrpc_bench_stream (not built)"
  fi
  if [ "$r" -eq 1 ] && [ -z "$quick" ]; then  # --quick: its 10 s pay for the rates above
    progress "round $r/$rounds: zcrpc RPC call rate (4 connections x 64 in flight, ${tput_secs}s)"
    zrun "zcrpc-rpc-tput-4" 120 "$bin/zcrpc_bench_rpc" -m tput -c 4 -d 64 -T "$tput_secs"
  fi
  for t in ib_write_bw ib_send_bw; do
    [ "$t" = ib_write_bw ] || [ "$r" -eq 1 ] || continue
    for s in $bw_sizes; do
      n=$(bulk_n "$s")
      progress "round $r/$rounds: $t -R -s $s -n $n"
      pair "perftest-$t-$s$at" 90 $t -R -d "$D0" -F -s "$s" -n "$n"
    done
  done
  progress "round $r/$rounds: zcrpc transport write bandwidth ($z_bw_sizes)"
  zrun "zcrpc-transport-bw$at" 900 "$bin/zcrpc_bench_transport" -m bw -s "$z_bw_sizes" -B "$bw_total"
  progress "round $r/$rounds: zcrpc RPC attachment bandwidth ($z_bw_sizes)"
  zrun "zcrpc-rpc-bw$at" 900 "$bin/zcrpc_bench_rpc" -m bw -s "$z_bw_sizes" -B "$bw_total"
}

# ---- the scale part (--scale) ----------------------------------------------------
# One zcrpc_bench_scale process per line of scale_runs; it forks a fresh
# server and the clients for each N and uses ports PORT .. PORT+len(N)-1.
scale_part() {
  local line label
  for line in "${scale_runs[@]}"; do
    label=${line%% *}
    progress "scale $label: ${line#* }"
    # shellcheck disable=SC2086
    zrun "zcrpc-scale-$label" 3000 "$bin/zcrpc_bench_scale" -L "$label" -D "$D0" ${line#* }
    port=$((port + 10))
  done
}

if [ -n "$only_scale" ]; then
  scale_part
  echo "[bench done in $(( $(date +%s) - t_start ))s]" >&2
  exit 0
fi
for r in $(seq "$rounds"); do
  one_round "$r"
done

# ---- one client over 1, 2 and 4 server processes (target channels) ------------
# For each N, N fresh zcrpc_bench_rpc -r server processes (each one
# busy-polling worker), then one client whose channel is a round_robin
# target over them. The guest's 2 CPUs are shared by all: the figure shows
# what one client gets from N servers on this machine, not a scaling law.
progress "zcrpc RPC call rate of one client over 1, 2, 4 server processes (round_robin, 64 in flight, ${tput_secs}s each)"
for n in 1 2 4; do
  bpids=() t="ipv4:" sep=
  for i in $(seq "$n"); do
    port=$((port + 1))
    "$bin/zcrpc_bench_rpc" -r server -a "$A0" -p "$port" >/dev/null 2>"$raw/zcrpc-balance-$n-server-$i.log" &
    bpids+=($!)
    t="$t$sep$A0:$port" sep=,
  done
  for i in $(seq "$n"); do
    for _ in $(seq 100); do grep -q listening "$raw/zcrpc-balance-$n-server-$i.log" && break; sleep 0.1; done
  done
  timeout 120 "$bin/zcrpc_bench_rpc" -r client -m tput -c 1 -d 64 -T "$tput_secs" -t "$t" \
    >"$raw/zcrpc-balance-$n.jsonl" 2>"$raw/zcrpc-balance-$n.log"
  record "zcrpc-balance-$n" $? "$raw/zcrpc-balance-$n.log" "$bin/zcrpc_bench_rpc -r client -m tput -c 1 -d 64 -T $tput_secs -t $t"
  kill "${bpids[@]}" 2>/dev/null; wait "${bpids[@]}" 2>/dev/null
done

# ---- rsocket rstream ---------------------------------------------------------
progress "rstream ${rs_opts:-(default tests 64..1m lat+bw)}"
port=$((port + 1))
timeout 300 rstream -b "$A0" -p $port $rs_opts >"$raw/rstream.server.txt" 2>&1 &
spid=$!
sleep 1.5
# shellcheck disable=SC2086
timeout 290 rstream -s "$A0" -p $port $rs_opts >"$raw/rstream.txt" 2>&1
rc=$?
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
record rstream $rc "$raw/rstream.txt" "server: rstream -b $A0 -p $port $rs_opts & client: rstream -s $A0 -p $port $rs_opts"

# ---- UCX ---------------------------------------------------------------------
if command -v ucx_perftest >/dev/null; then
  progress "ucx_perftest tag_lat -s 16,256,4096 and ucp_put_bw -s 65536"
  export UCX_NET_DEVICES=$D0:1
  for s in 16 256 4096; do
    port=$((port + 1))
    timeout 65 ucx_perftest -t tag_lat -s $s -n $lat_n -w $lat_w -p $port >"$raw/ucx-tag_lat-$s.server.txt" 2>&1 &
    spid=$!
    sleep 1.5
    timeout 60 ucx_perftest "$A0" -t tag_lat -s $s -n $lat_n -w $lat_w -p $port >"$raw/ucx-tag_lat-$s.txt" 2>&1
    rc=$?
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    record "ucx-tag_lat-$s" $rc "$raw/ucx-tag_lat-$s.txt" "UCX_NET_DEVICES=$UCX_NET_DEVICES ucx_perftest -t tag_lat -s $s -n $lat_n -w $lat_w -p $port [$A0]"
    [ $rc -eq 0 ] || break
  done
  if [ $rc -eq 0 ]; then
  port=$((port + 1))
  n=$(bulk_n 65536)
  timeout 125 ucx_perftest -t ucp_put_bw -s 65536 -n "$n" -p $port >"$raw/ucx-ucp_put_bw-65536.server.txt" 2>&1 &
  spid=$!
  sleep 1.5
  timeout 120 ucx_perftest "$A0" -t ucp_put_bw -s 65536 -n "$n" -p $port >"$raw/ucx-ucp_put_bw-65536.txt" 2>&1
  rc=$?
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  record ucx-ucp_put_bw-65536 $rc "$raw/ucx-ucp_put_bw-65536.txt" "UCX_NET_DEVICES=$UCX_NET_DEVICES ucx_perftest -t ucp_put_bw -s 65536 -n $n -p $port [$A0]"
  fi
  unset UCX_NET_DEVICES
else
  progress "ucx_perftest: not installed"
  echo "ucx_perftest: command not found (package ucx-utils)" >"$raw/ucx-missing.txt"
  record ucx-tag_lat-16 127 "$raw/ucx-missing.txt" "ucx_perftest -t tag_lat"
fi

# ---- gRPC over TCP ---------------------------------------------------------------
# One server process (gRPC's synchronous server) on A0, the clients in
# sequence as separate processes. Their TCP traffic crosses the veth pair:
# for the gRPC ports only, a rule sends locally sent packets to A0 out of
# A1's veth (table 100 of scripts/rxe-vm.d/rxe.sh's route_across_veth), so the
# client's source is A1; the server's replies to A1 take the existing rule
# back. veth byte counters before and after prove it (grpc-link.txt).
grpc_run() { # grpc_run ID TIMEOUT ARGS...
  local id=$1 to=$2 n0 n1; shift 2
  n0=$(cat "/sys/class/net/$g_dev0/statistics/rx_bytes" 2>/dev/null || echo 0)
  timeout "$to" "$bin/zcrpc_bench_grpc" -r client -a "$A0" -p $g_port "$@" \
    >"$raw/$id.jsonl" 2>"$raw/$id.log"
  local rc=$?
  n1=$(cat "/sys/class/net/$g_dev0/statistics/rx_bytes" 2>/dev/null || echo 0)
  printf '%s\t%s rx_bytes +%s\t%s\n' "$id" "$g_dev0" $(( n1 - n0 )) "$g_link" >>"$raw/grpc-link.txt"
  record "$id" $rc "$raw/$id.log" "$bin/zcrpc_bench_grpc -r client -a $A0 -p $g_port $*"
}
if [ -n "$grpc_on" ]; then
  port=$((port + 1))
  g_port=$port
  g_dev0=$(ip -o -4 addr show to "$A0/32" | awk '{print $2; exit}')
  g_link="veth: $A1 -> $A0"
  if ! err=$(ip rule add pref 9 iif lo to "$A0/32" ipproto tcp dport $g_port lookup 100 2>&1); then
    g_link="loopback (ip rule failed: $err)"
    echo "    gRPC: $g_link" >&2
  fi
  : >"$raw/grpc-link.txt"
  "$bin/zcrpc_bench_grpc" -r server -a "$A0" -p $g_port >/dev/null 2>"$raw/grpc-server.log" &
  spid=$!
  for _ in $(seq 100); do grep -q listening "$raw/grpc-server.log" && break; sleep 0.2; done
  for rep in $(seq $lat_reps); do
    progress "gRPC latency ($g_lat_sizes B; $g_lat_n calls, blocking stub) run $rep/$lat_reps"
    grpc_run "grpc-lat-$rep" 900 -m lat -s "$g_lat_sizes" -n "$g_lat_n" -w "$g_lat_w"
  done
  for c in $g_tput_conns; do
    progress "gRPC throughput ($c connection(s) x 64 in flight, async client, ${tput_secs}s)"
    grpc_run "grpc-tput-$c" 120 -m tput -c $c -d 64 -T "$tput_secs"
  done
  if [ -n "$g_bw_sizes" ]; then
    progress "gRPC bandwidth ($g_bw_sizes)"
    grpc_run grpc-bw 900 -m bw -s "$g_bw_sizes" -B "$bw_total"
  fi
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  ip rule del pref 9 2>/dev/null
else
  progress "gRPC: $grpc_status"
  echo "$grpc_status" >"$raw/grpc-not-built.txt"
  record grpc-lat-1 127 "$raw/grpc-not-built.txt" "$bin/zcrpc_bench_grpc (not built)"
fi

# ---- CPU cost: callgrind on the RPC client --------------------------------------
progress "callgrind: RPC client, $cg_calls calls of 16 B (server not traced)"
port=$((port + 1))
"$bin/zcrpc_bench_rpc" -r server -a "$A0" -p $port >/dev/null 2>"$raw/callgrind.server.log" &
spid=$!
for _ in $(seq 50); do grep -q listening "$raw/callgrind.server.log" && break; sleep 0.2; done
timeout 600 valgrind --tool=callgrind --toggle-collect=bench_measured_calls \
  --callgrind-out-file="$raw/callgrind.out" \
  "$bin/zcrpc_bench_rpc" -r client -m cpu -s 16 -n "$cg_calls" -w 20 -a "$A0" -p $port \
  >"$raw/callgrind.jsonl" 2>"$raw/callgrind.log"
rc=$?
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
record callgrind $rc "$raw/callgrind.log" "valgrind --tool=callgrind --toggle-collect=bench_measured_calls $bin/zcrpc_bench_rpc -r client -m cpu -s 16 -n $cg_calls -w 20 -a $A0 -p $port"

[ -z "$scale" ] || scale_part

echo "[bench done in $(( $(date +%s) - t_start ))s]" >&2
exit 0
