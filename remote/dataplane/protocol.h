// The data-path protocol moved to remote/protocol/protocol.h (issue 38). remote/client
// still includes it by this path until its own re-layout (the next step), which removes
// this file; everything else includes the new path.
#pragma once

#include "remote/protocol/protocol.h"
