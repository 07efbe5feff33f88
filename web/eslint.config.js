// ESLint (flat config): the recommended JavaScript and typescript-eslint rules and the React hooks
// rules (eslint-plugin-react-hooks' recommended set, which includes the React Compiler's checks).
// `npm run lint` fails on any finding, warnings included, and on a disable comment that disables
// nothing; `npm test` (which `make test` runs) runs it before vitest.
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import reactHooks from "eslint-plugin-react-hooks";
import globals from "globals";
import tseslint from "typescript-eslint";

export default defineConfig(
  { ignores: ["dist/", "node_modules/", "src/api/schema.d.ts"] },
  { linterOptions: { reportUnusedDisableDirectives: "error" } },
  js.configs.recommended,
  tseslint.configs.recommended,
  reactHooks.configs.flat.recommended,
  {
    files: ["**/*.{ts,tsx}"],
    languageOptions: { globals: globals.browser },
    rules: {
      // A page takes PageProps whether it reads them or not; `_` names the ones it does not.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["vite.config.ts", "eslint.config.js", "scripts/**/*.mjs"],
    languageOptions: { globals: globals.node },
  },
);
