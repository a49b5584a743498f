#!/usr/bin/env node
// Entry point of the kctl executable (and of `tsx src/cli/index.ts` in a checkout).
import { main } from './main.ts';

void main(process.argv.slice(2));
