# frontend tests
