package gitsource

// MaxPacks is maxPacks, for the tests of package gitsource_test.
const MaxPacks = maxPacks
