# shellcheck shell=bash
# Sourced by the two-process tests: stops the server process $spid and
# waits until it has exited (SIGTERM, then SIGKILL after 20 s), so the next
# test never starts while its RDMA resources are still being torn down (an
# ASan server's exit takes seconds; a connect made meanwhile went
# unanswered for 10 s in CI).
stop_server() {
  [ -n "${spid:-}" ] || return 0
  kill "$spid" 2>/dev/null || { spid=; return 0; }
  for _ in $(seq 200); do
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  spid=
}
