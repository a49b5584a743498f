// The hidden subcommand a parent kctl runs its staging child with (stage-child.ts). A module of
// its own so that kctl's entry can recognise it without loading the staging code.
export const STAGE_COMMAND = 'internal-stage';
