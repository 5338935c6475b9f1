/* errors: sl_strerror() from the SL_ERRNO_MAP table. */
#include "sluice.h"

const char *sl_strerror(int code) {
    switch (code) {
#define SL_ERRNO_CASE(name, value, msg)                                                                                \
    case value: return msg;
        SL_ERRNO_MAP(SL_ERRNO_CASE)
#undef SL_ERRNO_CASE
    }
    return "unknown error";
}
