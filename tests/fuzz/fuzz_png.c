/*
 * Fuzz target: PNG decoding through ferry_image_decode (header, then a decode
 * into a buffer of exactly the size needed, in RGB, grey, alpha and lenient modes),
 * with max_pixels 2^22 so that no input costs much memory.
 */
#include "image_target.h"
