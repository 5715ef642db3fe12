#!/usr/bin/python3
"""Turns the raw outputs of bench/run-in-guest.sh into results.json,
results.csv, results.md and latency.png / bandwidth.png (gnuplot).
Sources: perftest, rstream, ucx, zcrpc (zcrpc-*.jsonl) and grpc
(grpc-*.jsonl from bench/grpc, the same JSON line format).

Usage: bench/report.py OUTDIR       (reads OUTDIR/raw, OUTDIR/run.json)
Exit status 1 when perftest or zcrpc produced no numbers at all.
Standard library only (Debian's /usr/bin/python3)."""
import csv
import json
import os
import re
import subprocess
import sys

out = sys.argv[1]
raw = os.path.join(out, "raw")
LAT_SIZES = [16, 256, 4096]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tail(path, n=3):
    lines = [l.strip() for l in read(path).splitlines() if l.strip()]
    errs = [l for l in lines if "Fatal:" in l] or \
        [l for l in lines if re.search(r"[Ee]rror|[Ff]ailed|refused", l)]
    if errs:
        lines = errs
    return " | ".join(lines[-n:])[:300]


run = json.loads(read(os.path.join(out, "run.json")) or "{}")
PROV = run.get("provider", "rxe")   # the guest's provider: rxe or siw
DEV0 = PROV + "0"
runs = []
for line in read(os.path.join(raw, "runs.tsv")).splitlines():
    p = line.split("\t")
    if len(p) == 4:
        runs.append({"id": p[0], "rc": int(p[1]), "file": p[2], "cmd": p[3]})

records = []  # flat: source, test, size, metric, value, unit


def add(source, test, size, metric, value, unit, **extra):
    r = {"source": source, "test": test, "size": size, "metric": metric,
         "value": value, "unit": unit}
    r.update(extra)
    records.append(r)


# ---- rounds -------------------------------------------------------------------
# run-in-guest.sh runs perftest and zcrpc alternately in rounds; a run id
# of round R > 1 ends in @R (zcrpc latency runs: -R). Each figure becomes
# one record, that of the round with the median value (the lower one of
# two), with every round's value in "rounds" ({round: value}).
rounds_of = {}  # (source, test, size, conns) -> [entry]


def round_of(run_id):
    m = re.search(r"@(\d+)$", run_id)
    if m:
        return int(m.group(1))
    m = re.search(r"-lat-(\d+)$|-rate-(\d+)$", run_id)
    return int(m.group(1) or m.group(2)) if m else 1


def add_round(source, test, size, metric, value, unit, rnd, **extra):
    rounds_of.setdefault((source, test, size, extra.get("conns")), []).append(
        dict(extra, source=source, test=test, size=size, metric=metric, value=value,
             unit=unit, round=rnd))


def flush_rounds():
    for key, lst in sorted(rounds_of.items(), key=lambda kv: str(kv[0])):
        lst.sort(key=lambda e: e["value"])
        e = dict(lst[(len(lst) - 1) // 2])
        e["rounds"] = {str(x["round"]): x["value"] for x in sorted(lst, key=lambda x: x["round"])}
        records.append(e)
    rounds_of.clear()


# ---- perftest -----------------------------------------------------------------
NUM = r"([0-9.]+|inf|-?nan)"
perftest_settings = {}
for r in runs:
    m = re.match(r"perftest-(rate-)?(ib_\w+)-(\d+)(?:@\d+)?$", r["id"])
    if not m:
        continue
    rate, tool, size = bool(m.group(1)), m.group(2), int(m.group(3))
    rnd = round_of(r["id"])
    text = read(r["file"])
    inl = re.search(r"Max inline data\s*:\s*(\d+)", text)
    if inl:
        perftest_settings.setdefault(tool, {})["max_inline"] = int(inl.group(1))
    if tool.endswith("_lat"):
        m2 = re.search(r"^\s*(\d+)\s+(\d+)\s+" + r"\s+".join([NUM] * 7) + r"\s*$",
                       text, re.M)
        if m2 and m2.group(5) not in ("inf", "-nan", "nan"):
            v = [float(x) for x in m2.groups()[2:]]
            # send/write latency is RTT/2: t_typical = median of RTT/2
            add_round("perftest", tool, size, "t_typical_us", v[2], "us", rnd,
                      rtt_p50_us=2 * v[2], t_min_us=v[0], t_avg_us=v[3], p99_us=v[5],
                      p999_us=v[6], rtt_p99_us=2 * v[5], rtt_p999_us=2 * v[6],
                      iters=int(m2.group(2)))
            r["ok"] = True
    else:
        m2 = re.search(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", text, re.M)
        if m2 and float(m2.group(4)) == 0 and float(m2.group(5)) == 0:
            m2 = None  # perftest sometimes prints 0.00 for a run that completed: no figure
        if m2 and rate:
            # ib_send_bw -s 16 -t 64: the message rate (MsgRate[Mpps])
            add_round("perftest", tool + "_rate", size, "msgs_per_s",
                      float(m2.group(5)) * 1e6, "msgs/s", rnd, iters=int(m2.group(2)),
                      bw_avg_mib_s=float(m2.group(4)))
            r["ok"] = True
        elif m2:
            add_round("perftest", tool, size, "bw_avg_mib_s", float(m2.group(4)), "MiB/s", rnd,
                      bw_peak_mib_s=float(m2.group(3)), msg_rate_mpps=float(m2.group(5)),
                      iters=int(m2.group(2)))
            r["ok"] = True
flush_rounds()

# ---- rstream ------------------------------------------------------------------
for r in runs:
    if r["id"] != "rstream":
        continue
    for line in read(r["file"]).splitlines():
        t = line.split()
        if len(t) >= 8 and re.match(r"^(\d+[kmg]?_(lat|bw)|custom)$", t[0]):
            m3 = re.match(r"^(\d+)([kmg]?)$", t[1])
            if not m3:
                continue
            size = int(m3.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m3.group(2)]
            try:
                add("rstream", "rstream_" + (t[0].split("_")[1] if "_" in t[0] else t[0]),
                    size, "usec_per_xfer",
                    float(t[-1]), "us", gbit_s=float(t[-2]), name=t[0])
                r["ok"] = True
            except ValueError:
                pass

# ---- UCX ----------------------------------------------------------------------
for r in runs:
    m = re.match(r"ucx-(\w+)-(\d+)$", r["id"])
    if not m or r["rc"] != 0:
        continue
    text = read(r["file"])
    # final row: "Final: iters  lat50 lat_avg lat_overall  bw_avg bw_overall  rate_avg rate_overall"
    f = re.search(r"Final:\s+(\d+)\s+" + r"\s+".join([r"([0-9.]+)"] * 7), text)
    if f:
        v = [float(x) for x in f.groups()[1:]]
        add("ucx", "ucx_" + m.group(1), int(m.group(2)), "lat50_us" if "lat" in m.group(1)
            else "bw_avg_mib_s", v[0] if "lat" in m.group(1) else v[3],
            "us" if "lat" in m.group(1) else "MiB/s", lat_avg_us=v[1], bw_avg_mib_s=v[3])
        r["ok"] = True

# ---- zcrpc and gRPC (one JSON object per line) ---------------------------------
zc = {}
scale_rows = []
balance_rows = []  # one client over N server processes (target channels)
for r in runs:
    src = r["id"].split("-")[0]
    if src not in ("zcrpc", "grpc"):
        continue
    rnd = round_of(r["id"])
    for line in read(os.path.join(raw, r["id"] + ".jsonl")).splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        b = j.get("bench", "")
        if b == "zcrpc_stream_server_rate":
            # one test per shape: /STREAMS, /16/1paused (rate of the others)
            add_round(src, f"{b}/{j['streams']}" + (f"/{j['paused']}paused" if j["paused"]
                                                     else ""),
                      j["size"], "msgs_per_s", j["msgs_per_s"], "msgs/s", rnd,
                      streams=j["streams"], paused=j["paused"], msgs=j["msgs"],
                      window=j.get("window"), max_gap_us=j.get("max_gap_us"),
                      stream_msgs_min=j.get("stream_msgs_min"),
                      stream_msgs_max=j.get("stream_msgs_max"))
        elif b == "zcrpc_stream_client_bw":
            add_round(src, b, j["size"], "mib_s", j["mib_s"], "MiB/s", rnd, msgs=j["msgs"],
                      msgs_per_s=j["msgs_per_s"], window=j.get("window"))
        elif b.endswith("_lat"):
            add_round(src, b, j["size"], "rtt_p50_us", j["rtt_p50_us"], "us", rnd,
                      rtt_p99_us=j["rtt_p99_us"], rtt_p999_us=j["rtt_p999_us"],
                      iters=j["iters"], run=r["id"])
        elif b.endswith("_bw"):
            add_round(src, b, j["size"], "mib_s", j["mib_s"], "MiB/s", rnd, depth=j["depth"],
                      iters=j["iters"])
        elif b == "zcrpc_balance_tput":
            balance_rows.append({"servers": j["servers"], "calls_per_s": j["calls_per_s"],
                                 "depth": j["depth"], "size": j["size"], "secs": j["secs"]})
        elif b.endswith("_tput"):
            add_round(src, b, j["size"], "calls_per_s", j["calls_per_s"], "calls/s", rnd,
                      conns=j["conns"], depth=j["depth"],
                      **({"client": j["client"]} if "client" in j else {}))
        elif b.endswith("_rate"):
            add_round(src, b, j["size"], "msgs_per_s", j["msgs_per_s"], "msgs/s", rnd,
                      depth=j["depth"], iters=j["iters"])
        elif b == "zcrpc_scale":
            scale_rows.append(j)
        elif b.endswith("_stats"):
            zc[b + ":" + j.get("mode", "")] = j
            continue
        else:
            continue
        r["ok"] = True
flush_rounds()
# the latency records keep their runs' p50 list under the older name
for rec in records:
    if rec["source"] in ("zcrpc", "grpc") and rec["test"].endswith("_lat"):
        rec["runs_p50_us"] = sorted(rec["rounds"].values())

# ---- callgrind ----------------------------------------------------------------
cpu = None
cg = os.path.join(raw, "callgrind.out")
cg_run = next((r for r in runs if r["id"] == "callgrind"), None)
if os.path.exists(cg) and cg_run and cg_run["rc"] == 0:
    calls = 0
    for line in read(os.path.join(raw, "callgrind.jsonl")).splitlines():
        try:
            calls = json.loads(line).get("calls", calls)
        except ValueError:
            pass
    try:
        ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", cg],
                             capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as e:
        ann = ""
        print("report: callgrind_annotate:", e, file=sys.stderr)
    with open(os.path.join(out, "callgrind-annotate.txt"), "w") as f:
        f.write(ann)
    groups = {"zcrpc": 0, "verbs": 0, "libc": 0, "kernel_syscalls": 0, "other": 0}
    total = 0
    for line in ann.splitlines():
        m = re.match(r"^\s*([0-9,]+)\s+(?:\([ 0-9.]+%\)\s+)?(\S.*?)\s*(?:\[(.*)\])?\s*$", line)
        if not m or ":" not in m.group(2) or not m.group(3):
            continue
        n = int(m.group(1).replace(",", ""))
        obj = (m.group(3) or "") + " " + m.group(2)
        if "libzcrpc" in obj or "/src/transport/" in obj or "/src/rpc/" in obj or "/src/core/" in obj:
            groups["zcrpc"] += n
        elif "ibverbs" in obj or "librxe" in obj or "rdmacm" in obj:
            groups["verbs"] += n
        elif "libc.so" in obj or "ld-linux" in obj or "libc" in obj:
            groups["libc"] += n
        else:
            groups["other"] += n
        total += n
    if calls and total:
        cpu = {"calls": calls, "poll": "sleeping progress(w, -1) (no idle spin counted)",
               "payload": 16, "total_ir_per_call": round(total / calls)}
        for k, v in groups.items():
            if v:
                cpu[k + "_ir_per_call"] = round(v / calls)
        cg_run["ok"] = True

# ---- references that did not produce numbers ----------------------------------
failures = []
for r in runs:
    if not r.get("ok"):
        failures.append({"id": r["id"], "exit": r["rc"], "command": r["cmd"],
                         "error": tail(r["file"]) or "(no output)"})
grpc_status = read(os.path.join(out, "grpc-status.txt")).strip() or None
# Where the gRPC traffic went: "id<TAB>veth0 rx_bytes +N<TAB>path" per run.
grpc_link = [dict(zip(("id", "rx", "path"), l.split("\t")))
             for l in read(os.path.join(raw, "grpc-link.txt")).splitlines() if l.count("\t") == 2]


def get(source, test, size, metric=None):
    for r in records:
        if r["source"] == source and r["test"] == test and int(r["size"]) == size and \
                (metric is None or r["metric"] == metric):
            return r
    return None


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


lat_rows = []
for s in LAT_SIZES:
    ref = get("perftest", "ib_send_lat", s)
    wref = get("perftest", "ib_write_lat", s)
    t = get("zcrpc", "zcrpc_transport_lat", s)
    c = get("zcrpc", "zcrpc_rpc_lat", s)
    g = get("grpc", "grpc_lat", s)
    ref_rtt = ref["rtt_p50_us"] if ref else None
    lat_rows.append({
        "size": s,
        "perftest_send_rtt_us": ref_rtt,
        "perftest_write_rtt_us": wref["rtt_p50_us"] if wref else None,
        "transport_p50_us": t["value"] if t else None,
        "transport_p99_us": t["rtt_p99_us"] if t else None,
        "transport_p999_us": t["rtt_p999_us"] if t else None,
        "rpc_p50_us": c["value"] if c else None,
        "rpc_p99_us": c["rtt_p99_us"] if c else None,
        "rpc_p999_us": c["rtt_p999_us"] if c else None,
        "transport_ratio": ratio(t["value"] if t else None, ref_rtt),
        "rpc_ratio": ratio(c["value"] if c else None, ref_rtt),
        "grpc_p50_us": g["value"] if g else None,
        "grpc_p99_us": g["rtt_p99_us"] if g else None,
        "grpc_p999_us": g["rtt_p999_us"] if g else None,
        "grpc_ratio": ratio(g["value"] if g else None, ref_rtt),
    })

bw_sizes = sorted({int(r["size"]) for r in records if r["test"] in
                   ("ib_write_bw", "ib_send_bw", "zcrpc_transport_write_bw", "zcrpc_rpc_attach_bw",
                    "grpc_bw")})
bw_rows = []
for s in bw_sizes:
    w = get("perftest", "ib_write_bw", s)
    sb = get("perftest", "ib_send_bw", s)
    t = get("zcrpc", "zcrpc_transport_write_bw", s)
    c = get("zcrpc", "zcrpc_rpc_attach_bw", s)
    g = get("grpc", "grpc_bw", s)
    wv = w["value"] if w else None
    bw_rows.append({
        "size": s, "ib_write_bw": wv, "ib_send_bw": sb["value"] if sb else None,
        "transport_write": t["value"] if t else None, "rpc_attachment": c["value"] if c else None,
        "transport_ratio": ratio(t["value"] if t else None, wv),
        "rpc_ratio": ratio(c["value"] if c else None, wv),
        "grpc": g["value"] if g else None, "grpc_ratio": ratio(g["value"] if g else None, wv)})

tput_rows = [{"conns": r["conns"], "depth": r["depth"], "size": r["size"],
              "calls_per_s": r["value"]} for r in records if r["test"] == "zcrpc_rpc_tput"]
grpc_tput_rows = [{"conns": r["conns"], "depth": r["depth"], "size": r["size"],
                   "calls_per_s": r["value"], "client": r.get("client")}
                  for r in records if r["test"] == "grpc_tput"]



def find(source, test, size, conns=None):
    for r in records:
        if r["source"] == source and r["test"] == test and int(r["size"]) == size and \
                (conns is None or r.get("conns") == conns):
            return r
    return None


# Ratios within each round (zcrpc / perftest of the same round), their
# median and spread: the figures the targets are read from.
def round_ratio(name, z, ref, ref_factor=1.0):
    if not z or not ref:
        return None
    zr, rr = z.get("rounds", {}), ref.get("rounds", {})
    per = {k: round(zr[k] / (rr[k] * ref_factor), 3) for k in sorted(zr) if k in rr and rr[k]}
    if not per:
        return None
    v = sorted(per.values())
    med = v[(len(v) - 1) // 2] if len(v) % 2 else round((v[len(v) // 2 - 1] + v[len(v) // 2]) / 2, 3)
    return {"measure": name, "ratios": per, "median": med, "min": v[0], "max": v[-1],
            "spread": round(v[-1] - v[0], 3), "zcrpc": z["value"], "zcrpc_unit": z["unit"],
            "reference": ref["value"] * ref_factor, "reference_unit": ref["unit"],
            "rounds": len(per)}


def _hs(s):  # 4096 -> "4 KiB" (hsize, further below, is the same)
    return f"{s >> 20} MiB" if s >= 1 << 20 and s % (1 << 20) == 0 else \
        f"{s >> 10} KiB" if s >= 1024 and s % 1024 == 0 else f"{s} B"


round_rows = []
for s in LAT_SIZES:
    ref = find("perftest", "ib_send_lat", s)
    round_rows.append(round_ratio(f"RTT {_hs(s)} transport / 2×ib_send_lat",
                                  find("zcrpc", "zcrpc_transport_lat", s), ref, 2.0))
    round_rows.append(round_ratio(f"RTT {_hs(s)} RPC / 2×ib_send_lat",
                                  find("zcrpc", "zcrpc_rpc_lat", s), ref, 2.0))
rate_ref = find("perftest", "ib_send_bw_rate", 16)
round_rows.append(round_ratio("16 B message rate: transport (64 in flight) / ib_send_bw -t 64",
                              find("zcrpc", "zcrpc_transport_rate", 16), rate_ref))
round_rows.append(round_ratio("16 B rate: RPC calls (1 conn, 64 in flight) / ib_send_bw -t 64",
                              find("zcrpc", "zcrpc_rpc_tput", 16, conns=1), rate_ref))
for s in bw_sizes:
    ref = find("perftest", "ib_write_bw", s)
    round_rows.append(round_ratio(f"bandwidth {_hs(s)} conn_write / ib_write_bw",
                                  find("zcrpc", "zcrpc_transport_write_bw", s), ref))
    round_rows.append(round_ratio(f"bandwidth {_hs(s)} RPC attachment / ib_write_bw",
                                  find("zcrpc", "zcrpc_rpc_attach_bw", s), ref))
round_rows = [r for r in round_rows if r]

# Streams (issue 15): ratios within each round, as above. The unary
# reference is the 1-connection RPC call rate (64 in flight) of the same
# round; client-streaming goes beside ib_write_bw at the nearest size.
STREAM = "zcrpc_stream_server_rate"
unary = find("zcrpc", "zcrpc_rpc_tput", 16, conns=1)
s16 = find("zcrpc", STREAM + "/16", 16)
stream_rows = [
    (round_ratio("16 B server-streaming, 1 stream / unary calls (64 in flight)",
                 find("zcrpc", STREAM + "/1", 16), unary), "≥ 2"),
    (round_ratio("16 B server-streaming, 16 streams / unary calls (64 in flight)", s16, unary),
     "≥ 2"),
    (round_ratio("15 streams beside a paused one / 16 streams",
                 find("zcrpc", STREAM + "/16/1paused", 16), s16), "≥ 0.9 (cost < 10 %)"),
]
wsizes = sorted({int(r["size"]) for r in records if r["test"] == "ib_write_bw"})
for cbw in sorted((r for r in records if r["test"] == "zcrpc_stream_client_bw"),
                  key=lambda r: int(r["size"])):
    if not wsizes:
        break
    import math
    near = min(wsizes, key=lambda x: abs(math.log2(x / int(cbw["size"]))))
    # 1 MiB messages go by RDMA WRITE (the goal); one-frame ones in SENDs
    stream_rows.append((round_ratio(
        f"client-streaming, {_hs(int(cbw['size']))} messages / ib_write_bw {_hs(near)}",
        cbw, find("perftest", "ib_write_bw", near)),
        "≥ 0.9" if int(cbw["size"]) >= 1 << 20 else "—"))
for r, goal in stream_rows:
    if r:
        r["goal"] = goal
stream_rows = [r for r, _ in stream_rows if r]


# The scale part: one row per (config, N); sizes in MiB, per-connection
# figures over the connections that came up.
def mib(kib_or_bytes, div):
    return round(kib_or_bytes / div, 2) if kib_or_bytes is not None and kib_or_bytes >= 0 else None


def scale_row(j):
    if "skipped" in j:
        return {"label": j["label"], "n": j["n"], "skipped": j["skipped"]}
    s0, s1 = j.get("server_before") or {}, j.get("server_connected") or {}
    st0, st1 = s0.get("stats") or {}, s1.get("stats") or {}
    st2 = (j.get("server_after") or {}).get("stats") or {}
    srv_pps = None
    if "passes" in st1 and "passes" in st2 and st2["t_us"] > st1["t_us"]:
        srv_pps = round((st2["passes"] - st1["passes"]) / ((st2["t_us"] - st1["t_us"]) / 1e6))
    m0, m1 = s0.get("mem") or {}, s1.get("mem") or {}
    k = j["connected"] or None
    pin = st1.get("pool_pinned")
    d_pin = pin - st0.get("pool_pinned", 0) if pin is not None else None
    return {
        "label": j["label"], "n": j["n"], "procs": j["procs"], "window": j["window"],
        "max_calls": j["max_calls"], "handler_us": j["handler_us"], "ok": j["ok"],
        "connected": j["connected"], "failed_at": j["failed_at"], "error": j["error"],
        "connect_ms_per_conn": j["connect_ms_per_conn"], "calls_per_s": j["calls_per_s"],
        "client_passes_per_s": j.get("client_passes_per_s"), "server_passes_per_s": srv_pps,
        "bad_replies": j["bad_replies"], "failed_calls": j["failed_calls"],
        "server_pool_mib": mib(pin, 1 << 20),
        "server_pool_slots": st1.get("pool_capacity"),
        "server_pool_mib_per_1000": mib(d_pin * 1000 / k, 1 << 20) if k and d_pin is not None else None,
        "server_rss_mib_before": mib(m0.get("rss_kib"), 1024),
        "server_rss_mib_connected": mib(m1.get("rss_kib"), 1024),
        "server_pin_mib_connected": mib(m1.get("pin_kib"), 1024),
        "server_rss_kib_per_conn": round((m1["rss_kib"] - m0["rss_kib"]) / k, 1)
        if k and m1.get("rss_kib", -1) >= 0 and m0.get("rss_kib", -1) >= 0 else None,
        "client_rss_kib_per_conn": round(j["client_rss_kib"] / k, 1) if k else None,
        "pool_exhausted": st1.get("pool_exhausted"),
        "recv_posted": st1.get("recv_posted"), "recv_promised": st1.get("recv_promised"),
        "recv_budget": st1.get("recv_budget"),
        "rnr_before": j.get("rnr_before"), "rnr_after": j.get("rnr_after"), "exits": j["exits"]}


scale = [scale_row(j) for j in scale_rows]

results = {"run": run, "records": records, "latency": lat_rows, "bandwidth": bw_rows,
           "throughput": tput_rows, "grpc_throughput": grpc_tput_rows,
           "rounds": round_rows, "streams": stream_rows, "scale": scale,
           "balance": sorted(balance_rows, key=lambda r: r["servers"]),
           "grpc_status": grpc_status, "grpc_link": grpc_link, "cpu": cpu, "perftest_settings": perftest_settings,
           "zcrpc_stats": zc, "not_run": failures, "runs": runs}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    keys = ["source", "test", "size", "metric", "value", "unit"]
    wr = csv.writer(f)
    wr.writerow(keys + ["extra"])
    for r in records:
        wr.writerow([r[k] for k in keys] +
                    [json.dumps({k: v for k, v in r.items() if k not in keys})])


def fmt(v, nd=1):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def hsize(s):
    s = int(s)
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return f"{s >> 20} MiB"
    if s >= 1024 and s % 1024 == 0:
        return f"{s >> 10} KiB"
    return f"{s} B"


md = []
md.append(f"Run {run.get('date', '?')} ({'quick' if run.get('quick') else 'full'}), "
          f"commit {run.get('commit', '?')}, {run.get('machine', '?')}; other QEMU guests "
          f"running: {run.get('other_guests_before', '?')} at start, "
          f"{run.get('other_guests_after', '?')} at end.")
md.append("")
md.append("Latency: round trip (RTT) in µs, one message each way, one in flight, busy-poll (gRPC: "
          "blocking stub, epoll). "
          "Reference = 2 × ib_send_lat t_typical (perftest reports RTT/2).")
md.append("")
md.append("| size | 2×ib_send_lat | 2×ib_write_lat | transport p50 / p99 / p99.9 | ratio | "
          "RPC p50 / p99 / p99.9 | ratio | gRPC (TCP) p50 / p99 / p99.9 | ratio |")
md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in lat_rows:
    md.append(f"| {hsize(r['size'])} | {fmt(r['perftest_send_rtt_us'])} | "
              f"{fmt(r['perftest_write_rtt_us'])} | {fmt(r['transport_p50_us'])} / "
              f"{fmt(r['transport_p99_us'])} / {fmt(r['transport_p999_us'])} | "
              f"{fmt(r['transport_ratio'], 2)} | {fmt(r['rpc_p50_us'])} / {fmt(r['rpc_p99_us'])}"
              f" / {fmt(r['rpc_p999_us'])} | {fmt(r['rpc_ratio'], 2)} | "
              f"{fmt(r['grpc_p50_us'])} / {fmt(r['grpc_p99_us'])} / {fmt(r['grpc_p999_us'])} | "
              f"{fmt(r['grpc_ratio'], 2)} |")
md.append("")
multi = [r for r in records if r["source"] in ("zcrpc", "grpc") and
         len(r.get("runs_p50_us", [])) > 1]
if multi:
    md.append("Latency runs (p50 of each process run; the median run is shown above): " +
              "; ".join(f"{r['test'].replace('zcrpc_', '').replace('_lat', '')} {hsize(r['size'])}: "
                        + ", ".join(fmt(x) for x in r["runs_p50_us"]) for r in multi) + ".")
    md.append("")
md.append("Bandwidth in MiB/s (perftest's MB/sec are MiB/s). Ratio = zcrpc (or gRPC) / "
          "ib_write_bw (perftest stops at 8 MiB, its MAX_SIZE).")
md.append("")
md.append("| size | ib_write_bw | ib_send_bw | zcrpc_conn_write | ratio | RPC attachment | ratio "
          "| gRPC (TCP) | ratio |")
md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in bw_rows:
    md.append(f"| {hsize(r['size'])} | {fmt(r['ib_write_bw'])} | {fmt(r['ib_send_bw'])} | "
              f"{fmt(r['transport_write'])} | {fmt(r['transport_ratio'], 2)} | "
              f"{fmt(r['rpc_attachment'])} | {fmt(r['rpc_ratio'], 2)} | "
              f"{fmt(r['grpc'])} | {fmt(r['grpc_ratio'], 2)} |")
md.append("")
if tput_rows:
    md.append("RPC throughput (16 B echo, 64 calls in flight per connection, one client thread):"
              " " + "; ".join(f"{r['conns']} conn: {r['calls_per_s']:.0f} calls/s"
                              for r in tput_rows) + ".")
    md.append("")
if grpc_tput_rows:
    md.append("gRPC throughput (16 B Echo, 64 calls in flight per connection, one client thread "
              "on one completion queue, synchronous server): " +
              "; ".join(f"{r['conns']} conn: {r['calls_per_s']:.0f} calls/s"
                        for r in grpc_tput_rows) + ".")
    md.append("")
if grpc_status:
    paths = sorted({l["path"] for l in grpc_link})
    md.append(f"gRPC peer: {grpc_status}" + (
        f"; path {', '.join(paths)} ("
        + ", ".join(f"{l['id']}: {l['rx']}" for l in grpc_link) + ")" if grpc_link else "") + ".")
    md.append("")
if cpu:
    md.append(f"CPU (callgrind, client side, {cpu['calls']} calls of 16 B, sleeping progress): "
              f"{cpu.get('zcrpc_ir_per_call', 0)} instructions per call in zcrpc's code, "
              f"{cpu.get('verbs_ir_per_call', 0)} in libibverbs/{PROV} provider, "
              f"{cpu.get('libc_ir_per_call', 0)} in libc, {cpu['total_ir_per_call']} in all "
              "(user space only).")
    md.append("")
others = [r for r in records if r["source"] in ("rstream", "ucx")]
if others:
    if PROV == "siw":
        md.append("UCX has no iWARP transport: over siw its figures are its shared-memory "
                  "path (same guest), not RDMA; rstream runs over siw.")
    md.append("Peers: " + "; ".join(
        f"{r['test']} {r.get('name', '')} {hsize(r['size'])}: {fmt(r['value'], 2)} {r['unit']}"
        + (f" ({r['gbit_s']} Gb/s)" if 'gbit_s' in r else "")
        for r in others) + ".")
    md.append("")
if perftest_settings:
    md.append(f"perftest settings: `-R -d {DEV0} -F`, busy polling (its default), RC; max inline "
              "as reported: " + ", ".join(f"{k} {v.get('max_inline')} B"
                                         for k, v in sorted(perftest_settings.items())) +
              ". zcrpc: busy poll, 220 B inline requested (granted "
              f"{zc.get('zcrpc_transport_stats:lat', {}).get('max_inline', '?')} B), "
              "max_msg 8192.")
    md.append("")
if round_rows:
    nr = max(r["rounds"] for r in round_rows)
    md.append(f"Rounds: perftest and zcrpc alternately, {nr} round(s); ratio = zcrpc / perftest "
              "within each round (latency: zcrpc p50 RTT / 2 × ib_send_lat t_typical; rates "
              "and bandwidths: zcrpc / perftest, so above 1 is better), then the median of "
              "the rounds and their spread (max − min).")
    md.append("")
    md.append("| measure | zcrpc (median round) | perftest (median round) | ratio per round | "
              "median ratio | spread |")
    md.append("|---|---:|---:|---:|---:|---:|")
    for r in round_rows:
        md.append(f"| {r['measure']} | {fmt(r['zcrpc'])} {r['zcrpc_unit']} | {fmt(r['reference'])} | "
                  + ", ".join(f"{v:.2f}" for v in r["ratios"].values())
                  + f" | {r['median']:.2f} | {r['spread']:.2f} |")
    md.append("")
if stream_rows:
    md.append("Streams (zcrpc_bench_stream): one connection, server and client on one worker "
              "each as for the call rate, a window of 16 messages per stream; ratio within "
              "each round, then the median of the rounds and their spread (max − min). "
              "Reported, not asserted.")
    md.append("")
    md.append("| measure | figure (median round) | reference (median round) | ratio per round | "
              "median ratio | spread | goal |")
    md.append("|---|---:|---:|---:|---:|---:|---|")
    for r in stream_rows:
        md.append(f"| {r['measure']} | {fmt(r['zcrpc'])} {r['zcrpc_unit']} | "
                  f"{fmt(r['reference'])} {r['reference_unit']} | "
                  + ", ".join(f"{v:.2f}" for v in r["ratios"].values())
                  + f" | {r['median']:.2f} | {r['spread']:.2f} | {r['goal']} |")
    md.append("")
if balance_rows:
    one = next((r["calls_per_s"] for r in balance_rows if r["servers"] == 1), None)
    md.append("One client over N server processes (zcrpc_bench_rpc -t ipv4:…: a target "
              "channel, round_robin, 64 calls of 16 B in flight; each server one busy-polling "
              "worker, client and servers sharing the guest's CPUs). Aggregate calls/s and the "
              "ratio to one server. Reported, not asserted.")
    md.append("")
    md.append("| servers | calls/s | / 1 server |")
    md.append("|---:|---:|---:|")
    for r in sorted(balance_rows, key=lambda r: r["servers"]):
        md.append(f"| {r['servers']} | {fmt(r['calls_per_s'], 0)} | "
                  + (f"{r['calls_per_s'] / one:.2f}" if one else "–") + " |")
    md.append("")
if scale:
    md.append("Scale: N channels (connections) into one server process (one worker), one "
              "call of 16 B in flight per channel, every reply's payload verified; a fresh "
              "server per N. Server pool = bytes the server's worker pool registered once "
              "connected (send and receive slots; per 1,000 = its growth over the unconnected "
              "server, scaled); RSS/VmPin from /proc; RNR = rxe0's rcvd_rnr_err/send_rnr_err.")
    md.append("")
    md.append("| config | N | connected | setup ms/conn | server pool MiB (slots) | pool MiB per "
              "1,000 conns | server RSS MiB before → connected | server RSS KiB/conn | server VmPin "
              "MiB | client RSS KiB/conn | calls/s | progress passes/s client / server | bad / failed | "
              "RNR before → after | shared RQ posted / promised (budget) |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in scale:
        if "skipped" in r:
            md.append(f"| {r['label']} | {r['n']} | skipped: {r['skipped']} | | | | | | | | | | | | |")
            continue
        rb, ra = r["rnr_before"] or {}, r["rnr_after"] or {}
        cfg = r["label"] + (f" (window {r['window']}, max_calls {r['max_calls']}" if r["window"]
                            else " (library defaults") + (
            f", handler {r['handler_us']} µs" if r["handler_us"] else "") + (
            f", {r['procs']} client procs" if r["procs"] > 1 else "") + ")"
        md.append(f"| {cfg} | {r['n']} | {r['connected']}{'' if r['ok'] else ' ✗'} | "
                  f"{fmt(r['connect_ms_per_conn'])} | {fmt(r['server_pool_mib'])} "
                  f"({fmt(r['server_pool_slots'])}) | {fmt(r['server_pool_mib_per_1000'])} | "
                  f"{fmt(r['server_rss_mib_before'])} → {fmt(r['server_rss_mib_connected'])} | "
                  f"{fmt(r['server_rss_kib_per_conn'], 0)} | {fmt(r['server_pin_mib_connected'])} | "
                  f"{fmt(r['client_rss_kib_per_conn'], 0)} | "
                  f"{fmt(r['calls_per_s'], 0)} | {fmt(r['client_passes_per_s'], 0)} / "
                  f"{fmt(r['server_passes_per_s'], 0)} | {r['bad_replies']} / {r['failed_calls']} | "
                  f"{rb.get('rcvd_rnr_err')}/{rb.get('send_rnr_err')} → "
                  f"{ra.get('rcvd_rnr_err')}/{ra.get('send_rnr_err')} | "
                  + (f"{r['recv_posted']} / {r['recv_promised']} ({r['recv_budget']})"
                     if r.get("recv_budget") is not None else "—") + " |")
    md.append("")
    fails = [r for r in scale if "skipped" not in r and not r["ok"]]
    if fails:
        md.append("Scale failures: " + "; ".join(
            f"{r['label']} N = {r['n']}: " + (f"channel {r['failed_at']} failed"
                                              if r["failed_at"] else "did not complete")
            + f" ({r['connected']} connected): {r['error'] or '(no error text)'}"
            + (f" (server pool_exhausted {r['pool_exhausted']})" if r.get("pool_exhausted") else "")
            for r in fails) + ".")
        md.append("")
md.append("Did not run / no numbers:")
md.append("")
for fl in failures:
    md.append(f"- `{fl['id']}` (exit {fl['exit']}): `{fl['command']}` — {fl['error']}")
md.append("")
md.append("Plots: " + ("" if run.get("scale_only") else
                       "![latency](latency.png) ![bandwidth](bandwidth.png) ") +
          ("![scale](scale.png)" if scale else ""))
if run.get("scale_only"):  # only the scale part ran: leave out the empty tables
    keep = md.index(next(l for l in md if l.startswith("Scale:"))) if scale else len(md)
    md = md[:2] + md[keep:]
with open(os.path.join(out, "results.md"), "w") as f:
    f.write("\n".join(md) + "\n")

# ---- plots --------------------------------------------------------------------
def series(path, rows):
    with open(path, "w") as f:
        for x, y in rows:
            if y is not None:
                f.write(f"{x} {y}\n")


pd = os.path.join(out, "plotdata")
os.makedirs(pd, exist_ok=True)
series(f"{pd}/lat_send.dat", [(r["size"], r["perftest_send_rtt_us"]) for r in lat_rows])
series(f"{pd}/lat_write.dat", [(r["size"], r["perftest_write_rtt_us"]) for r in lat_rows])
series(f"{pd}/lat_transport.dat", [(r["size"], r["transport_p50_us"]) for r in lat_rows])
series(f"{pd}/lat_rpc.dat", [(r["size"], r["rpc_p50_us"]) for r in lat_rows])
series(f"{pd}/lat_grpc.dat", [(r["size"], r["grpc_p50_us"]) for r in lat_rows])
series(f"{pd}/bw_write.dat", [(r["size"], r["ib_write_bw"]) for r in bw_rows])
series(f"{pd}/bw_send.dat", [(r["size"], r["ib_send_bw"]) for r in bw_rows])
series(f"{pd}/bw_transport.dat", [(r["size"], r["transport_write"]) for r in bw_rows])
series(f"{pd}/bw_rpc.dat", [(r["size"], r["rpc_attachment"]) for r in bw_rows])
series(f"{pd}/bw_grpc.dat", [(r["size"], r["grpc"]) for r in bw_rows])
def xtics(sizes):
    return "set xtics (" + ", ".join(f'"{hsize(x).replace(" ", "")}" {x}' for x in sizes) + ")"


gp = f"""
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set logscale x 2
set grid
set key top left
set offsets graph 0.05, graph 0.05, 0, 0
{xtics(LAT_SIZES)}
set output '{out}/latency.png'
set title 'Round trip (p50) vs message size: zcrpc, gRPC and 2 x perftest t\\_typical (rxe, QEMU TCG)'
set xlabel 'message size'
set ylabel 'RTT [us] (log scale)'
set logscale y
plot '{pd}/lat_send.dat' w lp t '2 x ib\\_send\\_lat', '{pd}/lat_write.dat' w lp t '2 x ib\\_write\\_lat', \\
     '{pd}/lat_transport.dat' w lp t 'zcrpc transport', '{pd}/lat_rpc.dat' w lp t 'zcrpc RPC', \\
     '{pd}/lat_grpc.dat' w lp t 'gRPC (TCP)'
{xtics(bw_sizes or [4096])}
set output '{out}/bandwidth.png'
set title 'Bandwidth vs payload size (rxe, QEMU TCG)'
set xlabel 'payload size'
set ylabel 'MiB/s'
unset logscale y
set yrange [0:*]
plot '{pd}/bw_write.dat' w lp t 'ib\\_write\\_bw', '{pd}/bw_send.dat' w lp t 'ib\\_send\\_bw', \\
     '{pd}/bw_transport.dat' w lp t 'zcrpc\\_conn\\_write', '{pd}/bw_rpc.dat' w lp t 'zcrpc RPC attachment', \\
     '{pd}/bw_grpc.dat' w lp t 'gRPC (TCP)'
"""
labels = sorted({r["label"] for r in scale if "skipped" not in r})
for lb in labels:
    rows = [r for r in scale if r["label"] == lb and "skipped" not in r]
    series(f"{pd}/scale_pool_{lb}.dat", [(r["n"], r["server_pool_mib"]) for r in rows])
    series(f"{pd}/scale_rate_{lb}.dat", [(r["n"], r["calls_per_s"] or None) for r in rows])
gps = []
if not run.get("scale_only"):
    gps.append(("plots.gp", gp))
if labels:
    ns = []
    for n in sorted({r["n"] for r in scale if "skipped" not in r}):
        if not ns or n >= 1.5 * ns[-1]:  # tics that do not overlap
            ns.append(n)
    gps.append(("scale.gp", f"""
set terminal pngcairo size 1000,460 enhanced font 'Sans,10'
set output '{out}/scale.png'
set grid
set logscale x 2
set offsets graph 0.05, graph 0.05, 0, 0
set multiplot layout 1,2 title 'One server process, N channels (rxe, QEMU TCG)'
set xtics ({", ".join(f'"{n}" {n}' for n in ns)})
set xlabel 'channels (N)'
set logscale y
set yrange [*:*]
set key top left
set title 'memory registered by the server pool'
set ylabel 'MiB (log scale)'
plot {", ".join(f"'{pd}/scale_pool_{lb}.dat' w lp t '{lb}'" for lb in labels)}
set title 'calls/s, one in flight per channel'
set ylabel 'calls/s (log scale)'
plot {", ".join(f"'{pd}/scale_rate_{lb}.dat' w lp t '{lb}'" for lb in labels)}
unset multiplot
"""))
for name, text in gps:
    with open(os.path.join(pd, name), "w") as f:
        f.write(text)
    p = subprocess.run(["gnuplot", os.path.join(pd, name)], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"report: gnuplot {name} failed:", p.stderr.strip()[-500:], file=sys.stderr)

print("\n".join(md))
have_perftest = any(r["source"] == "perftest" for r in records)
have_zcrpc = any(r["source"] == "zcrpc" for r in records)
if run.get("scale_only"):
    have_perftest = True
    have_zcrpc = bool(scale)
if not have_perftest or not have_zcrpc:
    print(f"report: PROBLEM: numbers from perftest: {have_perftest}, from zcrpc: {have_zcrpc}",
          file=sys.stderr)
    sys.exit(1)
