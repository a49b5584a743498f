// Debian packages the test suite needs on a fresh machine (the build's own needs are in
// build-components.ts): a PostgreSQL server for kine's SQL backend.
import { ensureDebianPackages } from './debian.ts';

await ensureDebianPackages(['postgresql', 'procps']);
