// Class 3 of the jail's issue: the build reads what a source asks for. A computed include names a private file of
// the user's (JAIL_SECRET, from jail_targets.h); its first line is not C++, so the compiler prints it in an error,
// and the error goes back to the policy in the verdict.
#include "jail_targets.h"
#define LEAK_PATH JAIL_SECRET
#include LEAK_PATH
