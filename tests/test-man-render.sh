#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every man page renders with no raw POD codes.  podchecker passes a
# paragraph indented by mistake (it is a verbatim block, legal POD),
# yet man then shows its B<...>, C<...>, L<...> as typed: once
# throttle-ctl(1)'s stats section did.  So each page in man/ is
# formatted as it is installed (pod2man with man/Makefile.am's
# options, then man -l) and the text a reader sees must hold no
# formatting code and no POD ERRORS section.  First the check itself,
# on a page that has the mistake.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires pod2man --help
requires man --version

# render POD OUT: the page as a reader sees it, in OUT.
render ()
{
  local pod=$1 out=$2
  timeout 60 pod2man --section=1 --center=nbdkit-throttle \
    --release=nbdkit-throttle --name="$(basename "$pod" .pod)" "$pod" \
    > "$out.1" || fail "pod2man $pod failed"
  # Not a terminal: man-db drops the bold and underlining, leaving text.
  MANWIDTH=80 MANPAGER=cat PAGER=cat timeout 60 man -l "$out.1" \
    > "$out" 2>"$out.err" || { cat "$out.err"; fail "man -l $pod failed"; }
  [ -s "$out" ] || fail "man -l $pod rendered nothing"
}

# raw OUT: the lines of OUT that show a formatting code or a POD error.
raw ()
{
  grep -nE '[BCILFSEXZ]<|POD ERRORS' "$1" || :
}

cat > "$tmp/bad.pod" <<'POD'
=head1 NAME

bad - a page with a paragraph indented by mistake

=head1 DESCRIPTION

  An indented paragraph shows B<bold>, C<code> and L<a link(1)>
raw, as typed.

=cut
POD
render "$tmp/bad.pod" "$tmp/bad.txt"
[ -n "$(raw "$tmp/bad.txt")" ] ||
  { cat "$tmp/bad.txt"; fail "the check finds no raw code on a page that shows some"; }
echo "ok: the check finds the raw codes of an indented paragraph:"
raw "$tmp/bad.txt"

n=0
for pod in "$srcdir"/../man/*.pod; do
  name=$(basename "$pod" .pod)
  render "$pod" "$tmp/$name.txt"
  bad=$(raw "$tmp/$name.txt")
  [ -z "$bad" ] || { echo "$bad"; fail "man page $name shows raw POD codes (above)"; }
  echo "ok: $name: $(wc -l < "$tmp/$name.txt") lines, no raw POD code"
  n=$((n + 1))
done
[ "$n" -ge 5 ] || fail "only $n man pages found in $srcdir/../man"
echo "test-man-render: PASS ($n pages)"
