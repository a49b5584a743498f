// Debian packages the test suite needs on a fresh machine (the build's own needs are in
// build-components.ts and build-images.ts): a PostgreSQL server for kine's SQL backend, and
// what workers and the network-namespace lab use (iptables for kube-proxy and CNI, conntrack,
// busybox for probes inside lab hosts).
import { ensureDebianPackages } from './debian.ts';
import { LAB_PACKAGES } from '../test/e2e/lab/lab.ts';

await ensureDebianPackages(['postgresql', 'procps', 'openssl', ...LAB_PACKAGES]);
