/*
 * Fuzz target: PNG decoding through ferry_image_decode (header, then a decode
 * into a buffer of exactly the size needed, in RGB, grey, alpha and lenient modes),
 * then through ferry_image_decode_region with a crop and a reduction drawn from
 * the input, with max_pixels 2^22 so that no input costs much memory.
 */
#include "image_target.h"
