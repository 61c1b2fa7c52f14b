/** @type {import('jest').Config} */
const swcOptions = {
  jsc: {
    parser: { syntax: 'typescript', decorators: true },
    transform: { legacyDecorator: true, decoratorMetadata: true },
    target: 'es2022',
    keepClassNames: true,
  },
  module: { type: 'commonjs' },
  sourceMaps: 'inline',
};

module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src', '<rootDir>/test'],
  testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/test/**/*.test.ts'],
  transform: { '^.+\\.(t|j)s$': ['@swc/jest', swcOptions] },
  globalSetup: '<rootDir>/test/setup/global-setup.ts',
  globalTeardown: '<rootDir>/test/setup/global-teardown.ts',
  // ESM-only packages: Jest loads them through Node's require(esm) (needs
  // --experimental-vm-modules, set by `npm test`); fhir-kit-client exports only an
  // `import` condition, so point Jest's resolver at its entry.
  moduleNameMapper: { '^fhir-kit-client$': '<rootDir>/node_modules/fhir-kit-client/dist/index.js' },
  testTimeout: 60000,
  maxWorkers: 2,
  watchman: false,
};
