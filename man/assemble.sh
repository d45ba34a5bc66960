#!/bin/sh
# Assemble nbdkit-throttle-filter.pod from its parts: the filter's own
# text and the fragments written beside each feature's code, so each
# feature documents itself next to where it lives.
#   assemble.sh HEAD TAIL FRAGMENT... > nbdkit-throttle-filter.pod
set -e
head=$1 tail=$2; shift 2
cat "$head"
# Each fragment's PARAMETERS items (between its first =over and =back).
for f in "$@"; do
  awk '/^=head1 PARAMETERS/{p=1; next} p && /^=over/{q=1; next}
       q && /^=back/{exit} q' "$f"
done
echo "=back"
echo
# Each fragment's other sections.
for f in "$@"; do
  awk 'BEGIN{s=0} /^=head1 /{s = ($0 !~ /^=head1 PARAMETERS/)}
       /^=cut/{s=0} s' "$f"
done
cat "$tail"
