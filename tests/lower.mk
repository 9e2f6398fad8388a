# lower tests
