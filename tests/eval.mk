# eval tests
