#!/usr/bin/env bash
# Runs every benchmark in sequence inside the Soft-RoCE guest (started by
# scripts/bench through scripts/rxe-vm): perftest, rstream, ucx_perftest,
# the zcrpc programs, the gRPC peer (TCP across the veth pair) and a
# callgrind run of the RPC client. Raw outputs go
# to OUTDIR/raw (one file per run, plus runs.tsv listing each run's command
# and exit status); progress goes to stderr. Never fails on a reference
# that does not run: its command and error are kept for the report.
#
# Usage: bench/run-in-guest.sh BUILD_BENCH_DIR OUTDIR [--quick]
set -uo pipefail
bin=$1 out=$2 quick=${3:-}
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
  bw_sizes="4096 65536 262144" z_bw_sizes="4K,64K,1M,16M" lat_reps=1
  # gRPC: one tiny 16-byte latency run only (its calls take milliseconds
  # in the guest and its start seconds; the step must stay within 20 s)
  g_lat_sizes=16 g_lat_n=30 g_lat_w=5 g_tput_conns="" g_bw_sizes=""
else
  lat_n=3000 lat_w=300 bw_total=$((64 << 20)) tput_secs=5 cg_calls=1000 rs_opts=""
  lat_reps=3 g_lat_sizes=16,256,4K g_lat_n=$lat_n g_lat_w=$lat_w g_tput_conns="1 4" g_bw_sizes=$z_bw_sizes
fi
nbw=$(echo $bw_sizes | wc -w)
ngrpc=1
[ -z "$grpc_on" ] || ngrpc=$(( lat_reps + $(echo $g_tput_conns | wc -w) + $(echo $g_bw_sizes | wc -w | sed 's/[1-9][0-9]*/1/') ))
nsteps=$(( 6 + 2 * nbw + 1 + 1 + 2 * lat_reps + 2 + 2 + ngrpc + 1 ))
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

# ---- perftest ----------------------------------------------------------------
for t in ib_send_lat ib_write_lat; do
  for s in $lat_sizes; do
    progress "$t -R -s $s -n $lat_n"
    pair "perftest-$t-$s" 120 $t -R -d "$D0" -F -s "$s" -n "$lat_n"
  done
done
for t in ib_send_bw ib_write_bw; do
  for s in $bw_sizes; do
    n=$(bulk_n "$s")
    progress "$t -R -s $s -n $n"
    pair "perftest-$t-$s" 90 $t -R -d "$D0" -F -s "$s" -n "$n"
  done
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

# ---- zcrpc -------------------------------------------------------------------
zrun() { # zrun ID TIMEOUT PROGRAM ARGS...
  local id=$1 to=$2; shift 2
  port=$((port + 1))
  timeout "$to" "$@" -a "$A0" -p $port >"$raw/$id.jsonl" 2>"$raw/$id.log"
  local rc=$?
  record "$id" $rc "$raw/$id.log" "$* -a $A0 -p $port"
}
# Latency runs are repeated (full mode: 3 processes each, alternating):
# under TCG a whole run sometimes lands in a mode where every round trip
# waits for the guest's 4 ms scheduler tick; the report takes, per size,
# the run with the median p50 and keeps them all in results.json.
for rep in $(seq $lat_reps); do
  progress "zcrpc transport latency (16, 256, 4096 B; $lat_n round trips) run $rep/$lat_reps"
  zrun "zcrpc-transport-lat-$rep" 300 "$bin/zcrpc_bench_transport" -m lat -n "$lat_n" -w "$lat_w"
  progress "zcrpc RPC latency (16, 256, 4096 B; $lat_n calls) run $rep/$lat_reps"
  zrun "zcrpc-rpc-lat-$rep" 300 "$bin/zcrpc_bench_rpc" -m lat -n "$lat_n" -w "$lat_w"
done
for c in 1 4; do
  progress "zcrpc RPC throughput ($c connection(s) x 64 in flight, ${tput_secs}s)"
  zrun "zcrpc-rpc-tput-$c" 120 "$bin/zcrpc_bench_rpc" -m tput -c $c -d 64 -T "$tput_secs"
done
progress "zcrpc transport write bandwidth ($z_bw_sizes)"
zrun zcrpc-transport-bw 900 "$bin/zcrpc_bench_transport" -m bw -s "$z_bw_sizes" -B "$bw_total"
progress "zcrpc RPC attachment bandwidth ($z_bw_sizes)"
zrun zcrpc-rpc-bw 900 "$bin/zcrpc_bench_rpc" -m bw -s "$z_bw_sizes" -B "$bw_total"

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

echo "[bench done in $(( $(date +%s) - t_start ))s]" >&2
exit 0
