#!/usr/bin/env bash
# kv_sweep.sh: the key-value store's uniform read-only throughput (YCSB C,
# lookups/s per core) against key count and against occupancy, from
# bench/kv_bench runs, as gnuplot data and PNG plots (bench/kv_plot.gp).
# bench/README.md (kv_sweep) says what it runs; --help for the options.
set -u
set -o pipefail

prog=kv_sweep
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

usage() {
	cat <<EOF
usage: bench/kv_sweep.sh [OPTIONS] [-- KV_BENCH_OPTIONS...]

Runs bench/kv_bench once per point, with --no-small and (unless --peers)
--no-peers, and takes from the JSON line it prints last the uniform
read-only rate per core (farm.uniform_c.keys_per_core):
  - against key count: each of --keys at kv_bench's default occupancy;
  - against occupancy: each of --occ at --occ-keys keys.
Writes kv_sweep_keys.dat and kv_sweep_occ.dat (gnuplot), each run's output
(kv_sweep-*.txt), and, with gnuplot, kv_keys.png and kv_occ.png
(bench/kv_plot.gp) into --out. Loading 10M keys takes minutes.

  --bench PATH      kv_bench binary (default: $root/build/bench/kv_bench)
  --out DIR         output directory (default: bench-results next to the
                    directory of the kv_bench binary, as ht_bench)
  --keys LIST       key counts, comma-separated, suffixes k and M
                    (default 1M,2M,5M,10M; "none": skip this sweep)
  --occ LIST        occupancies in % (30..95; default 50,60,70,80,90;
                    "none": skip this sweep)
  --occ-keys N      keys for the occupancy sweep (default 1M)
  --seconds S       length of each measurement (default 1)
  --machines N      machine processes (default: kv_bench's, 2)
  --peers           also run memcached and Redis (slow; their figures
                    are not plotted)
  --no-plot         do not run gnuplot
  --dry-run         print the kv_bench commands, run nothing
  -h, --help        this text
Options after -- go to every kv_bench run. Exits 0 when every run
succeeded and the plots were made, 1 when one failed, 2 on bad usage.
EOF
}

die() {
	echo "$prog: $*" >&2
	exit 2
}

bench=$root/build/bench/kv_bench
out=
keys=1M,2M,5M,10M
occs=50,60,70,80,90
occ_keys=1M
seconds=1
machines=
peers=0
plot=1
dry=0
extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--bench) [ $# -ge 2 ] || die "--bench needs a value"; bench=$2; shift ;;
	--out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift ;;
	--keys) [ $# -ge 2 ] || die "--keys needs a value"; keys=$2; shift ;;
	--occ) [ $# -ge 2 ] || die "--occ needs a value"; occs=$2; shift ;;
	--occ-keys)
		[ $# -ge 2 ] || die "--occ-keys needs a value"
		occ_keys=$2
		shift
		;;
	--seconds)
		[ $# -ge 2 ] || die "--seconds needs a value"
		seconds=$2
		shift
		;;
	--machines)
		[ $# -ge 2 ] || die "--machines needs a value"
		machines=$2
		shift
		;;
	--peers) peers=1 ;;
	--no-plot) plot=0 ;;
	--dry-run) dry=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	--)
		shift
		extra=("$@")
		break
		;;
	*)
		usage >&2
		die "unknown option '$1'"
		;;
	esac
	shift
done

keycount='^[0-9]+[kM]?$'
[ "$keys" = none ] || [[ "$keys" =~ ^[0-9]+[kM]?(,[0-9]+[kM]?)*$ ]] ||
	die "bad --keys '$keys' (e.g. 1M,2M,500k)"
[ "$occs" = none ] || [[ "$occs" =~ ^[0-9]+(,[0-9]+)*$ ]] ||
	die "bad --occ '$occs' (percentages, e.g. 50,70,90)"
[[ "$occ_keys" =~ $keycount ]] || die "bad --occ-keys '$occ_keys'"
[[ "$seconds" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bad --seconds '$seconds'"
[ -z "$machines" ] || [[ "$machines" =~ ^[0-9]+$ ]] ||
	die "bad --machines '$machines'"
if [ "$occs" != none ]; then
	IFS=, read -r -a occ_list <<<"$occs"
	for o in "${occ_list[@]}"; do
		if [ "$o" -lt 30 ] || [ "$o" -gt 95 ]; then
			die "occupancy $o% out of kv_bench's range (30..95)"
		fi
	done
else
	occ_list=()
fi
if [ "$keys" != none ]; then
	IFS=, read -r -a key_list <<<"$keys"
else
	key_list=()
fi
[ ${#key_list[@]} -gt 0 ] || [ ${#occ_list[@]} -gt 0 ] ||
	die "nothing to run (--keys none and --occ none)"
if [ "$dry" -eq 0 ] && [ ! -x "$bench" ]; then
	die "no kv_bench at $bench: build it (cmake --build build --target" \
	    "kv_bench) or give --bench"
fi
if [ -z "$out" ]; then
	# <build>/bench/kv_bench -> <build>/bench-results
	out=$(dirname "$(dirname "$bench")")/bench-results
fi
if [ "$dry" -eq 0 ]; then
	mkdir -p "$out" || die "cannot create $out"
fi

common=(--seconds "$seconds" --no-small)
[ "$peers" -eq 1 ] || common+=(--no-peers)
[ -z "$machines" ] || common+=(--machines "$machines")
common+=("${extra[@]}")

# The first match of "NAME": NUMBER in the JSON line (top-level fields come
# before the nested ones that share a name).
jnum() {
	grep -o "\"$1\": [0-9.e+-]*" <<<"$2" | head -n 1 | sed 's/.*: //'
}

total=$((${#key_list[@]} + ${#occ_list[@]}))
n=0
t_start=$(date +%s)
# run LABEL DAT KV_BENCH_ARGS...: one point; appends a row to DAT.
run() {
	local label=$1 dat=$2
	shift 2
	n=$((n + 1))
	local log=$out/kv_sweep-$label.txt
	local cmd=("$bench" "$@" "${common[@]}")
	if [ "$dry" -eq 1 ]; then
		echo "[$n/$total] ${cmd[*]}"
		return 0
	fi
	echo "[$n/$total] $label: ${cmd[*]}"
	local t0
	t0=$(date +%s)
	if ! "${cmd[@]}" >"$log" 2>&1; then
		echo "$prog: kv_bench failed for $label (output: $log); its" \
		     "last lines:" >&2
		tail -n 15 "$log" >&2
		return 1
	fi
	local json
	json=$(tail -n 1 "$log")
	local c
	c=$(grep -o '"farm": {"uniform_c": {[^}]*}' <<<"$json")
	if [ -z "$c" ]; then
		echo "$prog: no uniform read-only figure in kv_bench's last" \
		     "line for $label (output: $log)" >&2
		return 1
	fi
	local nkeys occ rate rpl p50 load
	nkeys=$(jnum keys "$json")
	occ=$(jnum occupancy "$json")
	rpl=$(jnum reads_per_lookup "$json")
	load=$(jnum load_s "$json")
	rate=$(jnum keys_per_core "$c")
	p50=$(jnum p50_ns "$c")
	if [ -z "$nkeys" ] || [ -z "$occ" ] || [ -z "$rate" ]; then
		echo "$prog: cannot read keys/occupancy/rate from $log" >&2
		return 1
	fi
	awk -v k="$nkeys" -v o="$occ" -v r="$rate" -v q="${rpl:-0}" \
	    -v p="${p50:-0}" -v l="${load:-0}" \
	    'BEGIN { printf "%d %.2f %.0f %.4f %.2f %.1f\n",
	             k, o, r, q, p / 1e3, l }' >>"$dat"
	awk -v r="$rate" -v s="$(($(date +%s) - t0))" -v q="${rpl:-0}" \
	    'BEGIN { printf "      %.3f M lookups/s per core, %.4f reads " \
	             "per lookup (%d s)\n", r / 1e6, q, s }'
}

header() {
	local dat=$1 what=$2
	{
		echo "# kv_sweep: uniform read-only (YCSB C) lookups/s per" \
		     "core against $what"
		echo "# kv_bench ${common[*]}; $(date -u '+%Y-%m-%d %H:%M UTC')," \
		     "$(nproc) CPUs"
		echo "# keys occupancy lookups_per_s_per_core reads_per_lookup" \
		     "p50_us_loaded load_s"
	} >"$dat"
}

kdat=$out/kv_sweep_keys.dat
odat=$out/kv_sweep_occ.dat
failed=0
if [ ${#key_list[@]} -gt 0 ]; then
	[ "$dry" -eq 1 ] || header "$kdat" "key count"
	for k in "${key_list[@]}"; do
		run "keys-$k" "$kdat" --keys "$k" || failed=1
	done
fi
if [ ${#occ_list[@]} -gt 0 ]; then
	[ "$dry" -eq 1 ] || header "$odat" "occupancy ($occ_keys keys)"
	for o in "${occ_list[@]}"; do
		f=$(awk -v o="$o" 'BEGIN { printf "%.2f", o / 100 }')
		run "occ-$o" "$odat" --keys "$occ_keys" --occupancy "$f" ||
			failed=1
	done
fi
[ "$dry" -eq 0 ] || exit 0
echo "data: $kdat, $odat (runs: $out/kv_sweep-*.txt);" \
     "$(($(date +%s) - t_start)) s"

if [ "$plot" -eq 1 ]; then
	if ! command -v gnuplot >/dev/null 2>&1; then
		echo "$prog: gnuplot not found: no plots (the .dat files are" \
		     "written)" >&2
		exit 1
	fi
	if ! gnuplot -e "dir='$out'" "$here/kv_plot.gp"; then
		echo "$prog: gnuplot failed" >&2
		exit 1
	fi
	for p in kv_keys.png kv_occ.png; do
		[ -f "$out/$p" ] && echo "plot: $out/$p"
	done
fi
exit "$failed"
