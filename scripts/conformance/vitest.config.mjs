import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    testTimeout: 20000,
    hookTimeout: 20000,
  },
})
