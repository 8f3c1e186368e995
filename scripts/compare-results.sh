#!/bin/bash
# scripts/compare-results.sh A B — the NetCDF numbers of two results roots (e.g. two OUTLIERLAB_RESULTS of
# `make reproduce-all PROFILE=quick` on two commits): every results/<id>/<profile>/*.nc but the
# per-model histories (named by model hash), compared with ncdump at full precision: dimensions,
# variables, their attributes and values; the global attributes (provenance) are only listed.
a=$1; b=$2; n=0; bad=0; attrs=""
for fa in $(cd $a && find . -name '*.nc' | grep -v /history/ | sort); do
  n=$((n+1))
  da=$(ncdump -p 9,17 $a/$fa | sed 1d); db=$(ncdump -p 9,17 $b/$fa 2>/dev/null | sed 1d)
  body_a=$(echo "$da" | grep -v '^\s*:'); body_b=$(echo "$db" | grep -v '^\s*:')
  if [ "$body_a" != "$body_b" ]; then echo "DIFF $fa"; diff <(echo "$body_a") <(echo "$body_b") | head -5; bad=$((bad+1)); fi
  attrs="$attrs $(diff <(echo "$da" | grep '^\s*:') <(echo "$db" | grep '^\s*:') | grep '^[<>]' | sed 's/^[<>]\s*:\([A-Za-z_]*\).*/\1/' | sort -u | tr '\n' ' ')"
done
echo "$n files compared (dimensions, variables with their attributes, all values at full precision); $bad differ"
echo "global attributes that differ: $(echo $attrs | tr ' ' '\n' | sort -u | tr '\n' ' ')"
