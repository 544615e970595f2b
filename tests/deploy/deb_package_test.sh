#!/usr/bin/env bash
# Builds the Debian package from this build folder with cpack, checks what it
# holds and how it is described, installs it into a throwaway root with dpkg
# (its maintainer scripts run there) and runs the client from that root.
# Usage: deb_package_test.sh CMAKE CPACK BUILD_DIR VERSION MAN_PAGES(ON|OFF)
# Exit status 77 (a skip) when dpkg-deb, dpkg-shlibdeps, dpkg or cpack is missing.
set -euo pipefail

cmake=$1 cpack=$2 build_dir=$3 version=$4 man_pages=$5

for tool in "$cpack" dpkg dpkg-deb dpkg-shlibdeps file; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (Debian's dpkg-dev, file and cmake packages have them)"
    exit 77
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/moetier-deb-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

"$cpack" -G DEB --config "$build_dir/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; echo "FAIL: cpack failed" >&2; exit 1; }
deb="$work/out/moetier_${version}_$(dpkg --print-architecture).deb"
[[ -f $deb ]] || { ls "$work/out"; echo "FAIL: cpack made no $deb" >&2; exit 1; }
echo "package: $(basename "$deb"), $(du -h "$deb" | cut -f1)"

# --- contents -----------------------------------------------------------------
dpkg-deb -c "$deb" | awk '{print $1, $2, $NF}' >"$work/contents"
expect_file() {  # path [mode]
  local line
  line=$(grep -E " \\.$1\$" "$work/contents" || true)
  if [[ -z $line ]]; then fail "the package lacks $1"; return; fi
  [[ -z ${2:-} || $line == "$2 root/root "* ]] || fail "$1: $line, want $2 root/root"
}
programs=(moetierd moetier-worker moetier moetier-inspect moetier-synth moetier-policy-lab moetier-tracegen)
for program in "${programs[@]}"; do
  expect_file "/usr/bin/$program" -rwxr-xr-x
  if [[ $man_pages == ON ]]; then expect_file "/usr/share/man/man1/$program.1.gz" -rw-r--r--; fi
done
expect_file /lib/systemd/system/moetierd.service -rw-r--r--
expect_file /usr/lib/sysusers.d/moetier.conf -rw-r--r--
expect_file /usr/lib/tmpfiles.d/moetier.conf -rw-r--r--
expect_file /etc/moetier/moetierd.conf -rw-r--r--
expect_file /usr/share/doc/moetier/moetierd.conf.example
if grep -E ' \./usr/local/' "$work/contents"; then fail "files under /usr/local"; fi

# --- control fields and scripts -----------------------------------------------
dpkg-deb -f "$deb" Depends >"$work/depends"
echo "Depends: $(cat "$work/depends")"
for dep in libc6 'libgrpc\+\+1' libprotobuf32 'libstdc\+\+6'; do
  grep -Eq "(^|, )$dep" "$work/depends" || fail "Depends lacks $dep (shlibdeps)"
done
dpkg-deb -e "$deb" "$work/control"
[[ $(cat "$work/control/conffiles") == /etc/moetier/moetierd.conf ]] ||
  fail "conffiles: $(cat "$work/control/conffiles")"
for script in postinst prerm postrm; do
  [[ -x $work/control/$script ]] || fail "no executable $script"
done
grep -q 'systemctl.*enable' "$work/control/postinst" && fail "postinst enables the service"

# --- the unit names the packaged paths ----------------------------------------
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/moetierd.service >"$work/unit"
grep -qx 'ExecStart=/usr/bin/moetierd --config=/etc/moetier/moetierd.conf' "$work/unit" ||
  fail "unit: $(grep '^ExecStart=' "$work/unit")"
grep -qx 'Documentation=file:///usr/share/doc/moetier/README.md' "$work/unit" ||
  fail "unit: $(grep '^Documentation=' "$work/unit")"

# --- install into a throwaway root --------------------------------------------
# The scripts run on this machine with DPKG_ROOT set (no chroot: the root has
# no shell), as they would for a bootstrap tool.
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
if ! dpkg --root="$root" --log="$work/dpkg.log" --force-depends --force-not-root \
     --force-script-chrootless -i "$deb" >"$work/install.log" 2>&1; then
  cat "$work/install.log"
  fail "dpkg -i into $root failed"
fi
[[ $(dpkg-query --root="$root" -W -f='${Status}' moetier) == "install ok installed" ]] ||
  fail "dpkg status: $(dpkg-query --root="$root" -W -f='${Status}' moetier)"
reported=$("$root/usr/bin/moetier" --version) || fail "moetier --version exited $?"
[[ $reported == "moetier $version" ]] || fail "moetier --version printed '$reported'"
if [[ $(id -u) -eq 0 ]] && command -v systemd-sysusers >/dev/null; then
  # Owners are the root's own users, not this machine's: compare numbers.
  uid=$(awk -F: '$1 == "moetier" {print $3}' "$root/etc/passwd" 2>/dev/null)
  [[ -n $uid ]] || fail "postinst made no user moetier in $root"
  if command -v systemd-tmpfiles >/dev/null; then
    [[ $(stat -c '%u %a' "$root/var/lib/moetier" 2>&1) == "$uid 755" ]] ||
      fail "$root/var/lib/moetier: $(stat -c '%u %a' "$root/var/lib/moetier" 2>&1), want uid $uid, 755"
  fi
fi
if ! dpkg --root="$root" --log="$work/dpkg.log" --force-not-root --force-script-chrootless \
     --purge moetier >"$work/purge.log" 2>&1; then
  cat "$work/purge.log"
  fail "dpkg --purge failed"
fi
[[ ! -e $root/usr/bin/moetierd && ! -e $root/etc/moetier/moetierd.conf ]] ||
  fail "files left after purge"

# --- a plain install elsewhere: the unit follows --prefix, /etc is untouched ----
DESTDIR="$work/plain" "$cmake" --install "$build_dir" --prefix /opt/moetier >"$work/plain.log" 2>&1 ||
  { cat "$work/plain.log"; fail "cmake --install --prefix /opt/moetier failed"; }
plain_unit="$work/plain/opt/moetier/lib/systemd/system/moetierd.service"
grep -qx 'ExecStart=/opt/moetier/bin/moetierd --config=/etc/moetier/moetierd.conf' "$plain_unit" ||
  fail "$plain_unit: $(grep '^ExecStart=' "$plain_unit" 2>&1)"
[[ -x $work/plain/opt/moetier/bin/moetier-worker && -f $work/plain/opt/moetier/lib/tmpfiles.d/moetier.conf ]] ||
  fail "cmake --install --prefix /opt/moetier: no bin/moetier-worker or lib/tmpfiles.d/moetier.conf"
[[ ! -e $work/plain/etc ]] || fail "a plain install wrote $(find "$work/plain/etc" -type f)"

if ((failures > 0)); then exit 1; fi
echo "ok: contents, Depends, conffiles, unit paths, install and purge in a throwaway root, plain install"
