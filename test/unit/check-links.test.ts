// The docs link checker (assets/check-links.ts, in `npm run lint`): what it counts as a link and an anchor.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { anchorOf, anchorsOf, linksOf } from '../../assets/check-links.ts';

test('links: relative ones outside code, not URLs, not inside inline code or fenced blocks', () => {
  const text = [
    'See [install](docs/install.md) and [the sample](docs/install.md#the-two-commands), [k0s](https://k0sproject.io).',
    'Inline `[not](a-link.md)` code.',
    '```sh',
    'echo "[x](inside-a-block.md)"',
    '```',
    '[anchor only](#why-kctl)',
  ].join('\n');
  assert.deepEqual(linksOf(text), ['docs/install.md', 'docs/install.md#the-two-commands', '#why-kctl']);
});

test("anchors: GitHub's spelling, repeated headings numbered, headings inside code blocks ignored", () => {
  assert.equal(anchorOf('Add controllers (high availability)'), 'add-controllers-high-availability');
  assert.equal(anchorOf('The server: `kctl konnectivity-server`'), 'the-server-kctl-konnectivity-server');
  const anchors = anchorsOf('# kctl\n## Why kctl\n```sh\n# a comment\n```\n## Why kctl\n');
  assert.deepEqual([...anchors], ['kctl', 'why-kctl', 'why-kctl-1']);
});
