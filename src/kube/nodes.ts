// A Node as kctl reads it: its path, and whether it is Ready.
import { resourcePath } from './paths.ts';

export interface NodeConditions {
  status?: { conditions?: { type: string; status: string }[] };
}

/** /api/v1/nodes/<name> */
export const nodePath = (name: string): string => resourcePath({ apiVersion: 'v1', resource: 'nodes', name });

/** Its Ready condition is True. */
export const isNodeReady = (n: NodeConditions | undefined): boolean =>
  n?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
