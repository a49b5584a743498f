// Lint: typescript-eslint's recommended rules over everything we write. Layering is checked by
// test/unit/architecture.test.ts, formatting by prettier (.prettierrc.json).
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'src/konnectivity/wire/gen/', 'src/kube/gen/', 'bench/go-driver/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      'no-restricted-syntax': ['error', { selector: 'TSAsExpression > TSAsExpression[typeAnnotation.type="TSUnknownKeyword"]', message: 'no `as unknown as`: fix the types, or give the one remaining cast a one-line reason and an eslint-disable comment' }],
    },
  },
);
