// V8 flags baked into dist/kctl (SEA execArgv), shared with the bench so that the kctl
// processes it measures run as the shipped binary does.
// A 1 MiB young generation (V8 grows it to 16 MiB by default) keeps an idle controller or
// worker ~30 MiB smaller; bench/HISTORY.md has the before/after.
export const KCTL_NODE_FLAGS = ['--max-semi-space-size=1'];
