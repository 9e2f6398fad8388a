# shape tests
