package sdk

// CommitmentPreimage exposes the hash preimage to the vector test.
var CommitmentPreimage = commitmentPreimage
