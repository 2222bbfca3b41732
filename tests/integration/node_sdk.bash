# Shared by the server tests that run the official Node SDKs (sourced; not a test itself).

# node_sdks DIR PACKAGE...: the npm packages installed in DIR, once. Tests that run at the same
# time share DIR (the build's node-sdk), so the check and the install hold a lock on it. Returns
# 1 with the reason on stdout when node or npm is absent or the registry cannot be reached.
node_sdks() {
  local dir=$1
  shift
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "node or npm is absent"
    return 1
  fi
  mkdir -p "$dir"
  if ! (
    flock 9
    for p in "$@"; do
      [ -d "$dir/node_modules/$p" ] && continue
      cd "$dir" && exec timeout 300 npm install --no-audit --no-fund --silent "$@" >/dev/null 2>&1
    done
  ) 9>"$dir/.install.lock"; then
    echo "npm could not install $* (no registry?)"
    return 1
  fi
}
